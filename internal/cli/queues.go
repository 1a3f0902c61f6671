package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/api"
)

const queuesUsage = `
Usage: sluice queues [--endpoint URL] [--json]
       sluice queues create QUEUE [--fifo] [--no-dlq] [--max-receives N] [--owner TEAM] [--visibility D]
       sluice queues pause QUEUE
       sluice queues resume QUEUE
       sluice queues peek QUEUE [filters]   browse any queue without receiving

List every queue with its depth by state, the age of its oldest message,
its dead-letter queue and receive limit, and the queues that dead-letter
into it. A paused queue shows ",paused" after its type.

create makes QUEUE and, unless --no-dlq, its own dead-letter queue
QUEUE-dlq (14-day retention, receive limit 5 unless --max-receives), both
tagged with --owner; configuration warnings are printed.

pause holds delivery from QUEUE: receives (SQS and AMQP) get nothing while
its messages stay visible, e.g. while a downstream is down. resume lets
them flow again. The state survives restarts.
`

// Queues runs `sluice queues` and `sluice queues peek`.
func Queues(ctx context.Context, args []string, env *Env) int {
	if len(args) > 0 && (args[0] == "pause" || args[0] == "resume") {
		return queuesPause(ctx, args[1:], env, args[0])
	}
	if len(args) > 0 && args[0] == "create" {
		return queuesCreate(ctx, args[1:], env)
	}
	if len(args) > 0 && args[0] == "peek" {
		return queuesPeek(ctx, args[1:], env)
	}
	c := newCommand(env, "sluice queues", queuesUsage)
	return c.run(args, 0, 0, func([]string) int {
		var list api.QueueList
		if err := c.client().call(ctx, "GET", "queues", nil, nil, &list); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(list)
		}
		t := newTable(c.env.Stdout, "NAME", "TYPE", "VISIBLE", "INFLIGHT", "DELAYED", "WAITING", "OLDEST", "DLQ", "MAX-RECV", "DLQ-FOR")
		for _, q := range list.Queues {
			typ := "standard"
			if q.FIFO {
				typ = "fifo"
			}
			if q.Paused {
				typ += ",paused"
			}
			maxRecv := "-"
			if q.MaxReceiveCount > 0 {
				maxRecv = strconv.Itoa(q.MaxReceiveCount)
			}
			t.row(q.Name, typ, strconv.Itoa(q.Visible), strconv.Itoa(q.InFlight), strconv.Itoa(q.Delayed), strconv.Itoa(q.Waiting),
				age(q.OldestAgeSeconds), dash(q.DeadLetterQueue), maxRecv, dash(strings.Join(q.Sources, ",")))
		}
		t.flush()
		return ExitOK
	})
}

// queuesPause runs `sluice queues pause|resume QUEUE`.
func queuesPause(ctx context.Context, args []string, env *Env, verb string) int {
	c := newCommand(env, "sluice queues "+verb, queuesUsage)
	return c.run(args, 1, 1, func(pos []string) int {
		var q api.Queue
		if err := c.client().call(ctx, "POST", queuePath(pos[0], verb), nil, nil, &q); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(q)
		}
		state := "delivering"
		if q.Paused {
			state = "paused: receives get nothing; " + strconv.Itoa(q.Visible) + " message(s) held visible"
		}
		fmt.Fprintf(c.env.Stdout, "%s %s\n", q.Name, state)
		return ExitOK
	})
}

// queuesCreate runs `sluice queues create QUEUE`.
func queuesCreate(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice queues create", queuesUsage)
	fifo := c.fs.Bool("fifo", false, "a FIFO queue (the name must end in .fifo)")
	noDLQ := c.fs.Bool("no-dlq", false, "do not create the queue's dead-letter queue")
	maxRecv := c.fs.Int("max-receives", 0, "deliveries before a message is dead-lettered (default 5)")
	owner := c.fs.String("owner", "", "the team that triages the dead-letter queue (the owner tag)")
	vis := c.fs.Duration("visibility", 0, "visibility timeout (default 30s)")
	return c.run(args, 1, 1, func(pos []string) int {
		req := api.CreateQueueRequest{FIFO: *fifo, MaxReceiveCount: *maxRecv, Owner: *owner,
			VisibilityTimeoutSeconds: int(vis.Seconds())}
		if *noDLQ {
			no := false
			req.DeadLetterQueue = &no
		}
		var out api.CreateQueueResponse
		if err := c.client().call(ctx, "PUT", queuePath(pos[0]), nil, req, &out); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(out)
		}
		fmt.Fprintf(c.env.Stdout, "created %s", out.Queue.Name)
		if d := out.DeadLetterQueue; d != nil {
			fmt.Fprintf(c.env.Stdout, " with dead-letter queue %s (max receives %d)", d.Name, out.Queue.MaxReceiveCount)
		}
		fmt.Fprintln(c.env.Stdout)
		for _, w := range out.Warnings {
			fmt.Fprintf(c.env.Stderr, "warning: %s %s: %s\n", w.Queue, w.Check, w.Reason)
		}
		return ExitOK
	})
}
