package engine

import (
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
)

// TestRedriveWaitsForRoomInDestination: a redrive into a destination at
// its length limit moves only what fits and waits for room, whatever the
// destination's overflow; it never pushes the destination's messages out
// nor grows it past the limit (DLQ-97).
func TestRedriveWaitsForRoomInDestination(t *testing.T) {
	for _, overflow := range []string{OverflowDropHead, OverflowRejectPublish} {
		t.Run(overflow, func(t *testing.T) {
			f := newFixture(t)
			f.withDLQ(5, nil)
			f.poison(5, "KeyError")
			f.create("small", func(c *QueueConfig) { c.MaxLength, c.Overflow = 2, overflow })
			f.send("small", body("resident"))
			tk, err := f.e.StartMoveTask(MoveTaskSpec{Source: "dlq", Destination: "small", Rate: 100, SafetyThreshold: -1})
			if err != nil {
				t.Fatal(err)
			}
			// The first copy is moved and, once its batch is durable,
			// counted in the destination.
			f.stepUntil("one message moved", 10*time.Millisecond, func() bool {
				c, _ := f.e.GetMoveTask(tk.ID)
				info, _ := f.e.GetQueue("small")
				return c.Moved == 1 && info.Visible == 2
			})
			f.clk.Advance(time.Second) // many tokens, no room
			poll.Parked(t, f.clk, 2)   // the task looked for room and waits again
			f.e.GetQueue("small")
			if c, _ := f.e.GetMoveTask(tk.ID); c.Moved != 1 || c.Status != TaskRunning {
				t.Fatalf("task %+v", c)
			}
			info, _ := f.e.GetQueue("small")
			if info.Visible != 2 || info.Dropped != 0 || info.DeadLettered != 0 {
				t.Fatalf("destination %+v", info)
			}
			if got := bodies(f.recv("small", 1, time.Minute)); got[0] != "resident" {
				t.Fatalf("the destination's own message was pushed out: %v", got)
			}
			// A consumer makes room; the task moves on as it does. The
			// consumer keeps consuming while the clock steps: a moved
			// copy becomes receivable only once its batch is durable,
			// which on a real disk is after the task says it moved it.
			for moved := 2; moved <= 5; moved++ {
				f.stepUntil("the next move", 10*time.Millisecond, func() bool {
					for _, d := range f.recv("small", 10, time.Minute) {
						f.del("small", d.ReceiptHandle)
					}
					if info, _ := f.e.GetQueue("small"); info.Visible > 2 {
						t.Fatalf("destination past its limit: %+v", info)
					}
					c, _ := f.e.GetMoveTask(tk.ID)
					return c.Moved >= moved
				})
			}
			f.stepUntil("completion", 10*time.Millisecond, func() bool { c, _ := f.e.GetMoveTask(tk.ID); return c.Status == TaskCompleted })
		})
	}
}

// TestDeadLetterIntoFullRejectPublishTarget: a dead-letter queue at its
// limit with reject-publish refuses the dead letter, which is dropped and
// counted (reason target_full) instead of growing the DLQ past its limit;
// a drop-head DLQ takes it and drops its own oldest (DLQ-97).
func TestDeadLetterIntoFullRejectPublishTarget(t *testing.T) {
	f := newFixture(t)
	f.create("dlq", func(c *QueueConfig) { c.MaxLength, c.Overflow = 2, OverflowRejectPublish })
	f.create("q", func(c *QueueConfig) { c.DeadLetter = &DeadLetterPolicy{Target: "dlq", MaxReceiveCount: 5} })
	for i := 0; i < 3; i++ {
		f.send("q", body("p"))
		d := f.recv("q", 1, time.Minute)
		if _, err := f.e.ReportFailure("q", d[0].ReceiptHandle, Failure{Terminal: true}); err != nil {
			t.Fatal(err)
		}
	}
	if info, _ := f.e.GetQueue("dlq"); info.Visible != 2 {
		t.Fatalf("dlq %+v", info)
	}
	if info, _ := f.e.GetQueue("q"); info.Dropped != 1 || info.DeadLettered != 2 {
		t.Fatalf("source %+v", info)
	}
}
