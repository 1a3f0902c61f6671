package cli

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/sluicemq/sluice/api"
)

const dlqRedriveUsage = `
Usage: sluice dlq redrive QUEUE [--to DEST] [--rate N] [--dry-run] [--wait] [filters]

Move messages from the dead-letter queue QUEUE back into service, oldest
first, at a limited rate: to DEST, or by default each to the queue it was
dead-lettered from. Each moved message is a new message with a fresh
receive count; its original id and redrive count are kept. Redrive only
after the consumer is fixed, and only into idempotent consumers.

A safety stop pauses the task when --safety-threshold moved messages come
back to the DLQ within --safety-window of their move (the fix is not
working); resume it with "sluice dlq resume", or cancel it.

--dry-run shows how many messages would move, where, and a sample.
--wait draws a progress bar until the task ends; the exit code is 0 only
if it COMPLETED (1 if it FAILED, PAUSED or was CANCELLED; the reason is
printed).
`

func dlqRedrive(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice dlq redrive", dlqRedriveUsage)
	to := c.fs.String("to", "", "destination queue (default: the queue each message came from)")
	rate := c.fs.Int("rate", 0, "messages per second, 1–500 (default 50)")
	dryRun := c.fs.Bool("dry-run", false, "report what would move without moving anything")
	wait := c.fs.Bool("wait", false, "wait for the task to end, with a progress bar")
	window := c.fs.Duration("safety-window", 0, "a moved message dead-lettered again within this time counts as returned (default 30s)")
	threshold := c.fs.Int("safety-threshold", 0, "pause after this many returned messages (default 3)")
	ff := c.filterFlags()
	return c.run(args, 1, 1, func(pos []string) int {
		if err := ff.resolveIDs(ctx, c.client(), pos[0]); err != nil {
			return c.fail(err)
		}
		flt, err := ff.filter(c.env.Now())
		if err != nil {
			return c.usageError("%v", err)
		}
		rateSet := false
		c.fs.Visit(func(f *flag.Flag) { rateSet = rateSet || f.Name == "rate" })
		if rateSet && (*rate < 1 || *rate > api.MaxRedriveRate) {
			return c.usageError("--rate must be between 1 and %d messages per second (leave it out for the default, 50)", api.MaxRedriveRate)
		}
		if *dryRun && *wait {
			return c.usageError("--wait has nothing to wait for with --dry-run")
		}
		toSet := false
		c.fs.Visit(func(f *flag.Flag) { toSet = toSet || f.Name == "to" })
		if toSet && *to == "" {
			return c.usageError("--to needs a queue name; leave it out to return each message to the queue it came from")
		}
		req := api.RedriveRequest{
			Destination: *to, Rate: *rate, Filter: flt, DryRun: *dryRun,
			SafetyWindowSeconds: window.Seconds(), SafetyThreshold: *threshold,
		}
		path := queuePath(pos[0], "redrive")
		if *dryRun {
			var dry api.DryRun
			if err := c.client().call(ctx, "POST", path, nil, req, &dry); err != nil {
				return c.fail(err)
			}
			if c.json {
				return c.printJSON(dry)
			}
			printDryRun(c, pos[0], &dry)
			return ExitOK
		}
		var tk api.Task
		if err := c.client().call(ctx, "POST", path, nil, req, &tk); err != nil {
			return c.fail(err)
		}
		if !*wait {
			if c.json {
				return c.printJSON(tk)
			}
			fmt.Fprintf(c.env.Stdout, "started task %s: moving %d message(s) from %s to %s at %d msg/s\n",
				tk.ID, tk.ToMove, tk.Source, destination(&tk), tk.Rate)
			fmt.Fprintf(c.env.Stdout, "follow it with: sluice dlq tasks %s\n", tk.Source)
			return ExitOK
		}
		return waitTask(ctx, c, tk)
	})
}

func destination(tk *api.Task) string {
	if tk.Destination == "" {
		return "their source queues"
	}
	return tk.Destination
}

func printDryRun(c *command, queue string, dry *api.DryRun) {
	w := c.env.Stdout
	fmt.Fprintf(w, "dry run: %d message(s) in %s would move\n", dry.Total, queue)
	dests := make([]string, 0, len(dry.ByDestination))
	for d := range dry.ByDestination {
		dests = append(dests, d)
	}
	slices.Sort(dests)
	for _, d := range dests {
		fmt.Fprintf(w, "  to %s: %d\n", dash(d), dry.ByDestination[d])
	}
	if len(dry.Sample) > 0 {
		fmt.Fprintln(w, "sample:")
		t := newTable(w, "ID", "SENT", "REASON", "ERROR-CLASS", "ERROR")
		for _, m := range dry.Sample {
			reason, class, msg := "-", "-", "-"
			if d := m.DeadLetter; d != nil {
				reason = d.Reason
			}
			if f := m.LastFailure; f != nil {
				class, msg = dash(f.ErrorClass), dash(clip(f.Message, 48))
			}
			t.row(m.ID, stamp(m.SentAt), reason, class, msg)
		}
		t.flush()
	}
	fmt.Fprintln(w, "nothing was moved. Redriven messages are delivered again: consumers must be idempotent.")
}

// waitTask polls the task until it stops making progress on its own,
// showing progress on stderr (unless --json: a bar on a terminal, a line
// per change otherwise), then reports how it ended. Interrupting the wait leaves the task running.
func waitTask(ctx context.Context, c *command, tk api.Task) int {
	cl := c.client()
	timer := time.NewTimer(c.env.PollInterval)
	defer timer.Stop()
	last := ""
	progress := func(final bool) {
		if c.json {
			return
		}
		if c.env.Terminal {
			fmt.Fprint(c.env.Stderr, progressBar(tk.Moved, tk.ToMove, tk.Status))
			if final {
				fmt.Fprintln(c.env.Stderr)
			}
			return
		}
		if line := progressLine(tk.Moved, tk.ToMove, tk.Status); line != last {
			fmt.Fprintln(c.env.Stderr, line)
			last = line
		}
	}
	for !tk.Finished() {
		progress(false)
		timer.Reset(c.env.PollInterval)
		select {
		case <-ctx.Done():
			fmt.Fprintf(c.env.Stderr, "\nstopped waiting; task %s goes on (sluice dlq tasks %s)\n", tk.ID, tk.Source)
			return ExitFail
		case <-timer.C:
		}
		if err := cl.call(ctx, "GET", taskPath(tk.ID), nil, nil, &tk); err != nil {
			if !c.json && c.env.Terminal {
				fmt.Fprintln(c.env.Stderr)
			}
			return c.fail(err)
		}
	}
	progress(true)
	code := ExitOK
	if tk.Status != api.TaskCompleted {
		code = ExitFail
		msg := fmt.Sprintf("task %s ended %s after moving %d of %d message(s)", tk.ID, tk.Status, tk.Moved, tk.ToMove)
		if tk.StopRule != "" {
			msg += " (safety rule: " + tk.StopRule + ")"
		}
		if tk.FailureReason != "" {
			msg += ": " + tk.FailureReason
		}
		if tk.Status == api.TaskPaused {
			msg += "\nresume it with: sluice dlq resume " + tk.ID + "   or cancel it with: sluice dlq cancel " + tk.ID
		}
		fmt.Fprintln(c.env.Stderr, msg)
	}
	if c.json {
		if rc := c.printJSON(tk); rc != ExitOK {
			return rc
		}
		return code
	}
	if code == ExitOK {
		fmt.Fprintf(c.env.Stdout, "task %s completed: moved %d message(s) from %s to %s\n", tk.ID, tk.Moved, tk.Source, destination(&tk))
	}
	return code
}
