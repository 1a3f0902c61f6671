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

func dlqResume(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice dlq resume", dlqResumeUsage)
	return c.run(args, 1, 1, func(pos []string) int { return taskAction(ctx, c, pos[0], "resume") })
}
