package admin

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/engine"
)

// redrive serves POST /sluice/v1/queues/{name}/redrive with a
// RedriveRequest: a dry run answers 200 with a DryRun; otherwise the task
// starts and the answer is 202 with the Task and a Location header. The
// queue must be some queue's dead-letter queue.
func (h *Handler) redrive(w http.ResponseWriter, r *http.Request) error {
	// The outer destination shadows the embedded one, so that an empty
	// destination can be told from an absent one (DLQ-91: "" is an
	// error, never "to origin" by accident).
	var body struct {
		api.RedriveRequest
		Destination *string `json:"destination,omitempty"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	req := body.RedriveRequest
	if body.Destination != nil {
		if *body.Destination == "" {
			return badRequest("destination must name a queue; leave it out to return each message to the queue it was dead-lettered from")
		}
		req.Destination = *body.Destination
	}
	if req.Rate < 0 || req.Rate > engine.MaxMoveRate {
		return badRequest("rate must be between 1 and %d messages per second (0 or absent: %d)", engine.MaxMoveRate, engine.DefaultMoveRate)
	}
	if req.SafetyWindowSeconds < 0 || req.SafetyWindowSeconds > engine.MaxMoveTaskDuration.Seconds() || math.IsNaN(req.SafetyWindowSeconds) {
		return badRequest("safetyWindowSeconds must be between 0 and %.0f", engine.MaxMoveTaskDuration.Seconds())
	}
	if req.SafetyThreshold < 0 {
		return badRequest("safetyThreshold must not be negative")
	}
	f, err := engineFilter(&req.Filter)
	if err != nil {
		return err
	}
	spec := engine.MoveTaskSpec{
		Source:          r.PathValue("name"),
		Destination:     req.Destination,
		Rate:            req.Rate,
		Filter:          f,
		SafetyWindow:    duration(req.SafetyWindowSeconds),
		SafetyThreshold: req.SafetyThreshold,
	}
	if req.DryRun {
		dry, err := h.eng.DryRunMoveTask(spec)
		if err != nil {
			return err
		}
		out := api.DryRun{DryRun: true, Total: dry.Total, ByDestination: dry.ByDestination, Sample: make([]api.Message, 0, len(dry.Sample))}
		if out.ByDestination == nil {
			out.ByDestination = map[string]int{}
		}
		for i := range dry.Sample {
			out.Sample = append(out.Sample, messageJSON(&dry.Sample[i]))
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	tk, err := h.eng.StartMoveTask(spec)
	if active := (*engine.ActiveTaskError)(nil); errors.As(err, &active) {
		return &apiError{http.StatusConflict, "TaskRunning", fmt.Sprintf("%s already has an active redrive: %s", spec.Source, taskStateMessage("start another", &active.Task))}
	}
	if err != nil {
		return err
	}
	h.log.Info("admin redrive started", "task", tk.ID, "source", tk.Source, "destination", tk.Destination, "rate", tk.Rate, "to_move", tk.ToMove)
	w.Header().Set("Location", api.Prefix+"tasks/"+tk.ID)
	writeJSON(w, http.StatusAccepted, taskJSON(&tk))
	return nil
}

// listTasks serves GET /sluice/v1/tasks[?source=name]: the tasks of one
// source queue (404 if it does not exist), or of every queue, newest first.
func (h *Handler) listTasks(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	for k, vs := range q {
		if k != "source" || len(vs) > 1 {
			return badRequest("GET /tasks takes one optional query parameter, source")
		}
	}
	if src, ok := q["source"]; ok {
		list, err := h.eng.MoveTasks(src[0])
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, tasksJSON(list))
		return nil
	}
	out, err := h.localTasks()
	if err != nil {
		return err
	}
	if h.otherTasks != nil {
		more, err := h.otherTasks(r.Context())
		if err != nil {
			return &apiError{http.StatusServiceUnavailable, "ServiceUnavailable", "the tasks of another shard could not be listed (" + err.Error() + "); retry"}
		}
		out.Tasks = append(out.Tasks, more...)
		slices.SortStableFunc(out.Tasks, func(a, b api.Task) int { return startedAt(b).Compare(startedAt(a)) })
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ServeLocalTasks answers GET /sluice/v1/tasks for this handler's engine
// alone, without Options.OtherTasks: what a cluster's shard 0 reads from
// the other shards' leaders.
func (h *Handler) ServeLocalTasks(w http.ResponseWriter, r *http.Request) {
	h.wrap(func(w http.ResponseWriter, _ *http.Request) error {
		out, err := h.localTasks()
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}).ServeHTTP(w, r)
}

// localTasks lists the move tasks of every queue of this handler's
// engine, newest first.
func (h *Handler) localTasks() (api.TaskList, error) {
	var all []engine.MoveTask
	for _, name := range h.eng.ListQueues("") {
		list, err := h.eng.MoveTasks(name)
		if errors.Is(err, engine.ErrQueueNotFound) {
			continue
		}
		if err != nil {
			return api.TaskList{}, err
		}
		all = append(all, list...)
	}
	slices.SortStableFunc(all, func(a, b engine.MoveTask) int { return b.StartedAt.Compare(a.StartedAt) })
	return tasksJSON(all), nil
}

// tasksJSON is tasks in the API's shape.
func tasksJSON(tasks []engine.MoveTask) api.TaskList {
	out := api.TaskList{Tasks: make([]api.Task, 0, len(tasks))}
	for i := range tasks {
		out.Tasks = append(out.Tasks, taskJSON(&tasks[i]))
	}
	return out
}

// startedAt is t's start, the zero time when it has none.
func startedAt(t api.Task) time.Time {
	if t.StartedAt == nil {
		return time.Time{}
	}
	return *t.StartedAt
}

// getTask serves GET /sluice/v1/tasks/{id}.
func (h *Handler) getTask(w http.ResponseWriter, r *http.Request) error {
	return h.taskOp(w, r, "get", h.eng.GetMoveTask)
}

// cancelTask serves POST /sluice/v1/tasks/{id}/cancel: a RUNNING task
// becomes CANCELLING (then CANCELLED), a PAUSED one CANCELLED; any other
// state answers 409. Messages already moved stay moved.
func (h *Handler) cancelTask(w http.ResponseWriter, r *http.Request) error {
	return h.taskOp(w, r, "cancel", h.eng.CancelMoveTask)
}

// resumeTask serves POST /sluice/v1/tasks/{id}/resume: a PAUSED task runs
// again with a fresh safety count; any other state answers 409.
func (h *Handler) resumeTask(w http.ResponseWriter, r *http.Request) error {
	return h.taskOp(w, r, "resume", h.eng.ResumeMoveTask)
}

// pauseTask serves POST /sluice/v1/tasks/{id}/pause: an operator pauses a
// RUNNING task (resume or cancel it later); any other state answers 409.
func (h *Handler) pauseTask(w http.ResponseWriter, r *http.Request) error {
	return h.taskOp(w, r, "pause", h.eng.PauseMoveTask)
}

func (h *Handler) taskOp(w http.ResponseWriter, r *http.Request, action string, op func(string) (engine.MoveTask, error)) error {
	id := r.PathValue("id")
	tk, err := op(id)
	if errors.Is(err, engine.ErrTaskNotRunning) {
		if cur, gerr := h.eng.GetMoveTask(id); gerr == nil {
			return &apiError{http.StatusConflict, "InvalidTaskState", taskStateMessage(action, &cur)}
		}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, taskJSON(&tk))
	return nil
}

// taskStateMessage explains why action does not apply to tk in its
// current state, and what does.
func taskStateMessage(action string, tk *engine.MoveTask) string {
	id := tk.ID
	switch tk.Status {
	case engine.TaskPaused:
		return fmt.Sprintf("cannot %s: task is PAUSED; resume it with `sluice dlq resume %s` or cancel it with `sluice dlq cancel %s`", action, id, id)
	case engine.TaskRunning:
		return fmt.Sprintf("cannot %s: task is RUNNING (moved %d of %d); pause it with `sluice dlq pause %s` or cancel it with `sluice dlq cancel %s`", action, tk.Moved, tk.ToMove, id, id)
	case engine.TaskCancelling:
		return fmt.Sprintf("cannot %s: task is CANCELLING; it stops after the batch in progress", action)
	default:
		return fmt.Sprintf("cannot %s: task is %s and has ended (moved %d of %d); start a new one with `sluice dlq redrive %s`", action, tk.Status, tk.Moved, tk.ToMove, tk.Source)
	}
}
