package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/sluicemq/sluice/internal/server"
)

// runRepair is `sluice repair --data-dir DIR [--dry-run]`: it drops the
// records that make the broker refuse to start (engine.ErrNeedsRepair),
// after saying what they are. The broker must be stopped.
func runRepair(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice repair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", server.DefaultOptions().DataDir, "directory of the durable store (the broker must be stopped)")
	dryRun := fs.Bool("dry-run", false, "list what would be dropped and change nothing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice repair: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := server.Repair(*dataDir, *dryRun, stdout, log); err != nil {
		fmt.Fprintf(stderr, "sluice repair: %v\n", err)
		return 1
	}
	return 0
}
