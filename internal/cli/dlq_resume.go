package cli

import (
	"context"

	"github.com/sluicemq/sluice/api"
)

const dlqResumeUsage = `
Usage: sluice dlq resume TASK [--wait] [--json]

Resume a redrive task that its safety stop (or an operator) paused. It
carries on from where it stopped: the moved count continues and the
messages still to move are the ones it had not moved. The count of
returned messages starts again from zero: resuming says the fix is in
place. --wait shows the progress until the task ends, as "sluice dlq
redrive --wait" does.
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
	wait := c.fs.Bool("wait", false, "wait for the task to end, showing its progress")
	return c.run(args, 1, 1, func(pos []string) int {
		if !*wait {
			return taskAction(ctx, c, pos[0], "resume")
		}
		var tk api.Task
		if err := c.client().call(ctx, "POST", taskPath(pos[0], "resume"), nil, nil, &tk); err != nil {
			return c.fail(err)
		}
		return waitTask(ctx, c, tk)
	})
}
