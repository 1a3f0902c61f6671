package cli

import (
	"context"
	"fmt"

	"github.com/sluicemq/sluice/api"
)

const dlqDeleteUsage = `
Usage: sluice dlq delete QUEUE ID [--json]
       sluice dlq delete QUEUE filters… [--json]
       sluice dlq delete QUEUE --all [--json]

Delete one message by id (or a unique prefix of it), every message matching the filters, or, with
--all, every message in the queue. Deleting is final: export first if the
messages may be needed again. Without an id, filters or --all nothing is
deleted.
`

func dlqDelete(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice dlq delete", dlqDeleteUsage)
	all := c.fs.Bool("all", false, "delete every message in the queue")
	ff := c.filterFlags()
	return c.run(args, 1, 2, func(pos []string) int {
		if err := ff.resolveIDs(ctx, c.client(), pos[0]); err != nil {
			return c.fail(err)
		}
		flt, err := ff.filter(c.env.Now())
		if err != nil {
			return c.usageError("%v", err)
		}
		var res api.DeleteResult
		cl := c.client()
		switch {
		case len(pos) == 2:
			if *all || !flt.IsZero() {
				return c.usageError("give a message id, or filters, or --all; not several")
			}
			var id string
			if id, err = resolveID(ctx, cl, pos[0], pos[1]); err == nil {
				err = cl.call(ctx, "DELETE", queuePath(pos[0], "messages", id), nil, nil, &res)
			}
		case *all && !flt.IsZero():
			return c.usageError("--all deletes every message; it cannot be combined with filters")
		case !*all && flt.IsZero():
			return c.usageError("refusing to delete every message: give a message id, filters, or --all")
		default:
			err = cl.call(ctx, "POST", queuePath(pos[0], "messages:delete"), nil, api.DeleteRequest{Filter: flt, All: *all}, &res)
		}
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(res)
		}
		fmt.Fprintf(c.env.Stdout, "deleted %d message(s) from %s\n", res.Deleted, pos[0])
		return ExitOK
	})
}
