package cli

import (
	"context"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/api"
)

const dlqListUsage = `
Usage: sluice dlq list [--json]

List the dead-letter queues (queues that some queue names as its
dead-letter queue) with their depth, the age of their oldest message and
their source queues. ARRIVED counts messages that entered the queue since
the broker started. A DLQ never drains by itself: any depth means
messages that need a decision.
`

func dlqList(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice dlq list", dlqListUsage)
	return c.run(args, 0, 0, func([]string) int {
		var list api.QueueList
		if err := c.client().call(ctx, "GET", "queues", nil, nil, &list); err != nil {
			return c.fail(err)
		}
		dlqs := api.QueueList{Queues: []api.Queue{}}
		for _, q := range list.Queues {
			if q.IsDeadLetterQueue {
				dlqs.Queues = append(dlqs.Queues, q)
			}
		}
		if c.json {
			return c.printJSON(dlqs)
		}
		t := newTable(c.env.Stdout, "NAME", "DEPTH", "VISIBLE", "INFLIGHT", "OLDEST", "ARRIVED", "SOURCES")
		for _, q := range dlqs.Queues {
			t.row(q.Name, strconv.Itoa(q.Depth()), strconv.Itoa(q.Visible), strconv.Itoa(q.InFlight),
				age(q.OldestAgeSeconds), strconv.FormatUint(q.Counters.Sent, 10), strings.Join(q.Sources, ","))
		}
		t.flush()
		return ExitOK
	})
}
