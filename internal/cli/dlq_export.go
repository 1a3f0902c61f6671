package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
)

const dlqExportUsage = `
Usage: sluice dlq export QUEUE [filters] [--output FILE] > FILE.jsonl

Write the queue's messages (or those matching the filters) as JSON Lines,
one message per line with its attributes and failure context, exactly as
the admin API's browse shows them. Messages are not removed; "sluice dlq
import" reads the file back, keeping ids and context. The number of
messages written goes to stderr.
`

func dlqExport(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice dlq export", dlqExportUsage)
	output := c.fs.String("output", "", "write to this file instead of stdout")
	ff := c.filterFlags()
	return c.run(args, 1, 1, func(pos []string) int {
		if err := ff.resolveIDs(ctx, c.client(), pos[0]); err != nil {
			return c.fail(err)
		}
		q, err := ff.query(c.env.Now())
		if err != nil {
			return c.usageError("%v", err)
		}
		resp, err := c.client().send(ctx, "GET", queuePath(pos[0], "export"), q, nil, "")
		if err != nil {
			return c.fail(err)
		}
		defer func() { _ = resp.Body.Close() }() // read-only: its close error cannot matter
		out := c.env.Stdout
		if *output != "" {
			f, err := os.Create(*output)
			if err != nil {
				return c.fail(err)
			}
			// Closed (and checked) below once written; this close is for
			// the early returns, where the first error is the one reported.
			defer func() { _ = f.Close() }()
			out = f
		}
		bw := bufio.NewWriterSize(out, 64<<10)
		lines, err := copyLines(bw, resp.Body)
		if err == nil {
			err = bw.Flush()
		}
		if err == nil && *output != "" {
			f := out.(*os.File)
			err = f.Sync()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return c.fail(fmt.Errorf("export stopped after %d message(s): %w", lines, err))
		}
		fmt.Fprintf(c.env.Stderr, "exported %d message(s) from %s\n", lines, pos[0])
		return ExitOK
	})
}

// copyLines copies r to w and counts the newline-terminated lines. A
// stream that does not end with a newline was cut short.
func copyLines(w io.Writer, r io.Reader) (int, error) {
	buf := make([]byte, 64<<10)
	lines := 0
	last := byte('\n')
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			if b == '\n' {
				lines++
			}
		}
		if n > 0 {
			last = buf[n-1]
			if _, werr := w.Write(buf[:n]); werr != nil {
				return lines, werr
			}
		}
		if err == io.EOF {
			if last != '\n' {
				return lines, io.ErrUnexpectedEOF
			}
			return lines, nil
		}
		if err != nil {
			return lines, err
		}
	}
}
