package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/sluicemq/sluice/api"
)

const dlqImportUsage = `
Usage: sluice dlq import QUEUE [--input FILE] < FILE.jsonl

Add the messages of a JSON Lines export to QUEUE, keeping their ids, send
times, receive counts and failure context. The broker checks every line
first: one bad line refuses the whole file (the error names the line) and
nothing is imported. Importing the same file twice imports it twice.
`

func dlqImport(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice dlq import", dlqImportUsage)
	input := c.fs.String("input", "", "read this file instead of stdin")
	return c.run(args, 1, 1, func(pos []string) int {
		in := c.env.Stdin
		if *input != "" {
			f, err := os.Open(*input)
			if err != nil {
				return c.fail(err)
			}
			defer func() { _ = f.Close() }() // read-only: its close error cannot matter
			in = f
		}
		var res api.ImportResult
		resp, err := c.client().send(ctx, "POST", queuePath(pos[0], "import"), nil, io.NopCloser(in), "application/x-ndjson")
		if err != nil {
			return c.fail(err)
		}
		defer func() { _ = resp.Body.Close() }() // read-only: its close error cannot matter
		if err := decodeJSON(resp.Body, &res); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(res)
		}
		fmt.Fprintf(c.env.Stdout, "imported %d message(s) into %s\n", res.Imported, pos[0])
		return ExitOK
	})
}
