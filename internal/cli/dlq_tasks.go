package cli

import (
	"context"
	"fmt"
	"net/url"

	"github.com/sluicemq/sluice/api"
)

const dlqTasksUsage = `
Usage: sluice dlq tasks [QUEUE] [--json]

List the redrive tasks of the dead-letter queue QUEUE, or of every queue
without one, newest first (the broker keeps the last ten per queue):
status, progress, messages that came back within the safety window, and
why a task failed or paused.
`

func dlqTasks(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice dlq tasks", dlqTasksUsage)
	return c.run(args, 0, 1, func(pos []string) int {
		var list api.TaskList
		var q url.Values
		what := "any queue"
		if len(pos) == 1 {
			q, what = url.Values{"source": {pos[0]}}, pos[0]
		}
		if err := c.client().call(ctx, "GET", "tasks", q, nil, &list); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(list)
		}
		if len(list.Tasks) == 0 {
			fmt.Fprintf(c.env.Stdout, "no redrive tasks for %s\n", what)
			return ExitOK
		}
		t := newTable(c.env.Stdout, "ID", "SOURCE", "STATUS", "MOVED", "RETURNED", "REFILLED", "DESTINATION", "RATE", "STARTED", "RULE", "REASON")
		for _, tk := range list.Tasks {
			t.row(tk.ID, tk.Source, tk.Status, itoa(tk.Moved)+"/"+itoa(tk.ToMove), itoa(tk.Returned), itoa(tk.Refilled), dash(tk.Destination),
				itoa(tk.Rate), stamp(tk.StartedAt), dash(tk.StopRule), dash(tk.FailureReason))
		}
		t.flush()
		return ExitOK
	})
}

// taskAction posts a task action (cancel, resume) and prints the task's
// new state.
func taskAction(ctx context.Context, c *command, id, action string) int {
	var tk api.Task
	if err := c.client().call(ctx, "POST", taskPath(id, action), nil, nil, &tk); err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(tk)
	}
	fmt.Fprintf(c.env.Stdout, "task %s: %s (moved %d of %d)\n", tk.ID, tk.Status, tk.Moved, tk.ToMove)
	return ExitOK
}
