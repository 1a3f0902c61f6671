package cli

import (
	"context"
)

const dlqResumeUsage = `
Usage: sluice dlq resume TASK [--json]

Resume a redrive task that its safety stop (or an operator) paused. The
task's count of returned messages starts again from zero: resuming says
the fix is in place.
`

const dlqPauseUsage = `
Usage: sluice dlq pause TASK [--json]

Pause a running redrive task; resume it with "sluice dlq resume" or end it
with "sluice dlq cancel". Messages already moved stay moved.
`

func dlqPause(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice dlq pause", dlqPauseUsage)
	return c.run(args, 1, 1, func(pos []string) int { return taskAction(ctx, c, pos[0], "pause") })
}

func dlqResume(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice dlq resume", dlqResumeUsage)
	return c.run(args, 1, 1, func(pos []string) int { return taskAction(ctx, c, pos[0], "resume") })
}
