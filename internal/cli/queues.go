package cli

import (
	"context"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/internal/admin"
)

const queuesUsage = `
Usage: sluice queues [--endpoint URL] [--json]
       sluice queues peek QUEUE [filters]   browse any queue without receiving

List every queue with its depth by state, the age of its oldest message,
its dead-letter queue and receive limit, and the queues that dead-letter
into it.
`

// Queues runs `sluice queues` and `sluice queues peek`.
func Queues(ctx context.Context, args []string, env *Env) int {
	if len(args) > 0 && args[0] == "peek" {
		return queuesPeek(ctx, args[1:], env)
	}
	c := newCommand(env, "sluice queues", queuesUsage)
	return c.run(args, 0, 0, func([]string) int {
		var list admin.QueueList
		if err := c.client().call(ctx, "GET", "queues", nil, nil, &list); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(list)
		}
		t := newTable(c.env.Stdout, "NAME", "TYPE", "VISIBLE", "INFLIGHT", "DELAYED", "OLDEST", "DLQ", "MAX-RECV", "DLQ-FOR")
		for _, q := range list.Queues {
			typ := "standard"
			if q.FIFO {
				typ = "fifo"
			}
			maxRecv := "-"
			if q.MaxReceiveCount > 0 {
				maxRecv = strconv.Itoa(q.MaxReceiveCount)
			}
			t.row(q.Name, typ, strconv.Itoa(q.Visible), strconv.Itoa(q.InFlight), strconv.Itoa(q.Delayed),
				age(q.OldestAgeSeconds), dash(q.DeadLetterQueue), maxRecv, dash(strings.Join(q.Sources, ",")))
		}
		t.flush()
		return ExitOK
	})
}
