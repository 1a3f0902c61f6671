package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicemq/sluice/internal/cli"
)

// runCLI runs an admin-API client command (sluice queues, sluice dlq …)
// with the process's stdin and environment; an interrupt cancels its
// requests (a redrive keeps running in the broker).
func runCLI(cmd func(context.Context, []string, *cli.Env) int, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cmd(ctx, args, &cli.Env{Stdin: os.Stdin, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv, Terminal: isTerminal(stderr)})
}

// isTerminal reports whether w is a character device (a terminal), where
// progress bars may redraw themselves.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
