package cli

import (
	"context"
)

const dlqCancelUsage = `
Usage: sluice dlq cancel TASK [--json]

Cancel a running or paused redrive task. Messages already moved stay where
they were moved; the rest stay in the dead-letter queue.
`

func dlqCancel(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice dlq cancel", dlqCancelUsage)
	return c.run(args, 1, 1, func(pos []string) int { return taskAction(ctx, c, pos[0], "cancel") })
}
