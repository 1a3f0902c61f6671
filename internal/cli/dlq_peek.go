package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluicemq/sluice/api"
)

const dlqPeekUsage = `
Usage: sluice dlq peek QUEUE [--limit N] [--cursor C] [filters] [--json]

Browse messages in queue order without receiving them: receive counts,
visibility and redelivery flags do not change. One page at a time; when
there are more, the last line gives the --cursor of the next page.

Example:
  sluice dlq peek orders-dlq --error-class ValidationError --since 2h
`

const queuesPeekUsage = `
Usage: sluice queues peek QUEUE [--limit N] [--cursor C] [filters] [--json]

Browse any queue's messages in queue order without receiving them:
receive counts, visibility and redelivery flags do not change. One page at
a time; when there are more, the last line gives the --cursor of the next
page. The filters are those of "sluice dlq peek".

Example:
  sluice queues peek orders --attribute tenant=acme --since 10m
`

func dlqPeek(ctx context.Context, args []string, env *Env) int {
	return peek(ctx, args, env, "sluice dlq peek", dlqPeekUsage)
}

func queuesPeek(ctx context.Context, args []string, env *Env) int {
	return peek(ctx, args, env, "sluice queues peek", queuesPeekUsage)
}

// peek is sluice dlq peek and sluice queues peek: the same browse, under
// the name the user typed.
func peek(ctx context.Context, args []string, env *Env, name, usage string) int {
	c := newCommand(env, name, usage)
	limit := c.fs.Int("limit", 20, "messages per page (1–1000)")
	cursor := c.fs.String("cursor", "", "continue after a previous page (its next cursor)")
	ff := c.filterFlags()
	return c.run(args, 1, 1, func(pos []string) int {
		if err := ff.resolveIDs(ctx, c.client(), pos[0]); err != nil {
			return c.fail(err)
		}
		q, err := ff.query(c.env.Now())
		if err != nil {
			return c.usageError("%v", err)
		}
		q.Set("limit", strconv.Itoa(*limit))
		if *cursor != "" {
			q.Set("cursor", *cursor)
		}
		var page api.Page
		if err := c.client().call(ctx, "GET", queuePath(pos[0], "messages"), q, nil, &page); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(page)
		}
		if len(page.Messages) == 0 {
			fmt.Fprintf(c.env.Stdout, "no messages in %s match\n", pos[0])
			return ExitOK
		}
		t := newTable(c.env.Stdout, "ID", "SENT", "RECEIVES", "REASON", "SOURCE", "ERROR-CLASS", "ERROR")
		for _, m := range page.Messages {
			reason, source := "-", "-"
			if d := m.DeadLetter; d != nil {
				reason, source = d.Reason, d.SourceQueue
			}
			class, msg := "-", "-"
			if f := m.LastFailure; f != nil {
				class, msg = dash(f.ErrorClass), dash(clip(f.Message, 48))
			}
			t.row(m.ID, stamp(m.SentAt), strconv.Itoa(m.ReceiveCount), reason, source, class, msg)
		}
		t.flush()
		if page.Next != "" {
			fmt.Fprintf(c.env.Stdout, "more: %s %s --cursor %s\n", name, pos[0], page.Next)
		}
		return ExitOK
	})
}
