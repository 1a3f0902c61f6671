package engine

import (
	"fmt"
	"time"
)

// refillWindow compares, over consecutive windows of the task's
// SafetyWindow, the messages dead-lettered into a move task's source
// (refill) with those the task moved out (drain): the second abort rule of
// DLQ-93. A redrive of a bug that is not fixed refills its dead-letter
// queue as fast as it drains it, whether or not the returning messages are
// the redriven ones.
type refillWindow struct {
	start   time.Time
	refill  int
	drained int
}

// noteRefill is told that a message was dead-lettered into queue at at.
func (e *Engine) noteRefill(queue string, at time.Time) {
	e.tasks.mu.Lock()
	tk := e.tasks.activeLocked(queue)
	var reason string
	if tk != nil && tk.Status == TaskRunning {
		tk.Refilled++
		tk.win.refill++
		reason = e.checkRefillLocked(tk, at)
	}
	e.tasks.mu.Unlock()
	if reason != "" {
		e.setStatus(tk, TaskPaused, reason, TaskRunning)
	}
}

// noteDrain is told that the task moved n messages out at at.
func (e *Engine) noteDrain(tk *task, n int, at time.Time) {
	e.tasks.mu.Lock()
	var reason string
	if tk.Status == TaskRunning {
		tk.win.drained += n
		reason = e.checkRefillLocked(tk, at)
	}
	e.tasks.mu.Unlock()
	if reason != "" {
		e.setStatus(tk, TaskPaused, reason, TaskRunning)
	}
}

// checkRefillLocked closes the task's window when a full SafetyWindow has
// passed and returns the pause reason when, over it, refill exceeded the
// drain (and reached SafetyThreshold, so a stray dead letter during a slow
// redrive does not stop it). A threshold of 0 disables the rule.
func (e *Engine) checkRefillLocked(tk *task, at time.Time) string {
	if tk.SafetyThreshold == 0 || tk.SafetyWindow <= 0 {
		return ""
	}
	if tk.win.start.IsZero() {
		tk.win.start = at
		return ""
	}
	if at.Sub(tk.win.start) < tk.SafetyWindow {
		return ""
	}
	w := tk.win
	tk.win = refillWindow{start: at}
	if w.refill < tk.SafetyThreshold || w.refill <= w.drained {
		return ""
	}
	tk.StopRule = StopRefill
	return fmt.Sprintf("Sluice.RefillExceedsDrain: in %s, %d messages were dead-lettered into %s while the task moved %d out; the bug is not fixed yet. Resume or cancel the task.",
		at.Sub(w.start).Round(time.Second), w.refill, tk.Source, w.drained)
}
