package cli

import (
	"context"
	"fmt"
	"io"
	"os"
)

const definitionsUsage = `Usage: sluice definitions <command> [flags]

Export and import the broker's declared objects as one JSON document, like
RabbitMQ's definitions: SQS queues with their attributes (dead-letter
queue, redrive and retry policies included) and the durable AMQP
exchanges, queues and bindings. Messages are not included (see
"sluice dlq export"). The same objects can be declared in the config file
([[queues]], [[exchanges]], [[amqp_queues]], [[bindings]]).

Commands:
  export [--output FILE]        write the definitions to stdout (or FILE)
  import [FILE]                 apply a definitions document (stdin without FILE);
                                what exists with the same settings is left alone

Common flags: --endpoint URL (or $SLUICE_ENDPOINT; default http://127.0.0.1:9324), --json.
`

// Definitions runs `sluice definitions <command>`.
func Definitions(ctx context.Context, args []string, env *Env) int {
	e := env.withDefaults()
	if len(args) == 0 {
		fmt.Fprint(e.Stderr, definitionsUsage)
		return ExitUsage
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(e.Stdout, definitionsUsage)
		return ExitOK
	case "export":
		return definitionsExport(ctx, args[1:], e)
	case "import":
		return definitionsImport(ctx, args[1:], e)
	default:
		fmt.Fprintf(e.Stderr, "sluice definitions: unknown command %q\n\n%s", args[0], definitionsUsage)
		return ExitUsage
	}
}

func definitionsExport(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice definitions export", definitionsUsage)
	output := c.fs.String("output", "", "write to this file instead of stdout")
	return c.run(args, 0, 0, func([]string) int {
		resp, err := c.client().send(ctx, "GET", "definitions", nil, nil, "")
		if err != nil {
			return c.fail(err)
		}
		defer func() { _ = resp.Body.Close() }() // read-only: its close error cannot matter
		if *output == "" {
			if _, err := io.Copy(c.env.Stdout, resp.Body); err != nil {
				return c.fail(err)
			}
			return ExitOK
		}
		f, err := os.Create(*output)
		if err != nil {
			return c.fail(err)
		}
		_, err = io.Copy(f, resp.Body)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return c.fail(err)
		}
		fmt.Fprintf(c.env.Stderr, "definitions written to %s\n", *output)
		return ExitOK
	})
}

// definitionsResult is the answer of POST /sluice/v1/definitions.
type definitionsResult struct {
	Queues     int `json:"queues"`
	Exchanges  int `json:"exchanges"`
	AMQPQueues int `json:"amqp_queues"`
	Bindings   int `json:"bindings"`
}

func definitionsImport(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice definitions import", definitionsUsage)
	return c.run(args, 0, 1, func(pos []string) int {
		in := c.env.Stdin
		if len(pos) == 1 && pos[0] != "-" {
			f, err := os.Open(pos[0])
			if err != nil {
				return c.fail(err)
			}
			defer func() { _ = f.Close() }() // read-only: its close error cannot matter
			in = f
		}
		resp, err := c.client().send(ctx, "POST", "definitions", nil, io.NopCloser(in), "application/json")
		if err != nil {
			return c.fail(err)
		}
		defer func() { _ = resp.Body.Close() }() // read-only: its close error cannot matter
		var res definitionsResult
		if err := decodeJSON(resp.Body, &res); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(res)
		}
		fmt.Fprintf(c.env.Stdout, "applied %d queue(s), %d exchange(s), %d AMQP queue(s), %d binding(s)\n",
			res.Queues, res.Exchanges, res.AMQPQueues, res.Bindings)
		return ExitOK
	})
}
