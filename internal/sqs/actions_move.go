package sqs

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/sluicemq/sluice/internal/engine"
)

// Message move tasks (DLQ redrive, reference §8.5): StartMessageMoveTask,
// CancelMessageMoveTask and ListMessageMoveTasks over the engine's move
// tasks. The engine does the moving (oldest first, rate-limited, each
// message a new message in its destination); this file maps ARNs, task
// handles, statuses and errors.
//
// Statuses are the engine's, which are SQS's (RUNNING, COMPLETED,
// CANCELLING, CANCELLED, FAILED) plus Sluice's PAUSED: a task stopped by
// a safety rule (redriven messages came straight back, or the queue refilled
// faster than the task drained it; FailureReason names the rule). PAUSED is
// reported as it is, with the reason in FailureReason, and can be
// cancelled like a RUNNING task.

// Limits of the move task actions.
const (
	maxMoveTasksListed   = engine.MoveTasksKeptPerSource // ListMessageMoveTasks MaxResults ≤ 10
	maxTaskHandleLength  = 4096                          // a handle is ~150 bytes; longer is garbage
	paramSourceArn       = "SourceArn"
	paramDestinationArn  = "DestinationArn"
	paramTaskHandle      = "TaskHandle"
	paramMoveRate        = "MaxNumberOfMessagesPerSecond"
	msgMoveRateRange     = "Must be between 1 and 500, if provided."
	msgMoveMaxResults    = "Must be between 1 and 10, if provided."
	msgSameSourceAndDest = "The destination queue must be different from the source queue."
)

type startMoveTaskInput struct {
	SourceArn                    string
	DestinationArn               string
	MaxNumberOfMessagesPerSecond optInt
}

func (in *startMoveTaskInput) fromQuery(f form) *apiError {
	in.SourceArn = f.get("SourceArn")
	in.DestinationArn = f.get("DestinationArn")
	in.MaxNumberOfMessagesPerSecond = f.optInt("MaxNumberOfMessagesPerSecond")
	return nil
}

type cancelMoveTaskInput struct {
	TaskHandle string
}

func (in *cancelMoveTaskInput) fromQuery(f form) *apiError {
	in.TaskHandle = f.get("TaskHandle")
	return nil
}

type listMoveTasksInput struct {
	SourceArn  string
	MaxResults optInt
}

func (in *listMoveTasksInput) fromQuery(f form) *apiError {
	in.SourceArn = f.get("SourceArn")
	in.MaxResults = f.optInt("MaxResults")
	return nil
}

type startMoveTaskOutput struct {
	TaskHandle string `json:"TaskHandle"`
}

func (o *startMoveTaskOutput) xml(w *xmlWriter) { w.elem("TaskHandle", o.TaskHandle) }

type cancelMoveTaskOutput struct {
	ApproximateNumberOfMessagesMoved int64 `json:"ApproximateNumberOfMessagesMoved"`
}

func (o *cancelMoveTaskOutput) xml(w *xmlWriter) {
	w.elem("ApproximateNumberOfMessagesMoved", strconv.FormatInt(o.ApproximateNumberOfMessagesMoved, 10))
}

// moveTaskEntry is a ListMessageMoveTasksResultEntry. Optional members are
// left out when not set, as SQS does.
type moveTaskEntry struct {
	TaskHandle                        string `json:"TaskHandle,omitempty"`
	Status                            string `json:"Status"`
	SourceArn                         string `json:"SourceArn"`
	DestinationArn                    string `json:"DestinationArn,omitempty"`
	MaxNumberOfMessagesPerSecond      *int   `json:"MaxNumberOfMessagesPerSecond,omitempty"`
	ApproximateNumberOfMessagesMoved  int64  `json:"ApproximateNumberOfMessagesMoved"`
	ApproximateNumberOfMessagesToMove int64  `json:"ApproximateNumberOfMessagesToMove"`
	FailureReason                     string `json:"FailureReason,omitempty"`
	StartedTimestamp                  int64  `json:"StartedTimestamp"` // epoch milliseconds
}

// listMoveTasksOutput always carries Results (an empty list when the
// source has no tasks), so clients can index it unconditionally.
type listMoveTasksOutput struct {
	Results []moveTaskEntry `json:"Results"`
}

func (o *listMoveTasksOutput) xml(w *xmlWriter) {
	for _, r := range o.Results {
		w.open("ListMessageMoveTasksResultEntry")
		w.elemOpt("TaskHandle", r.TaskHandle)
		w.elem("Status", r.Status)
		w.elem("SourceArn", r.SourceArn)
		w.elemOpt("DestinationArn", r.DestinationArn)
		if r.MaxNumberOfMessagesPerSecond != nil {
			w.elem("MaxNumberOfMessagesPerSecond", strconv.Itoa(*r.MaxNumberOfMessagesPerSecond))
		}
		w.elem("ApproximateNumberOfMessagesMoved", strconv.FormatInt(r.ApproximateNumberOfMessagesMoved, 10))
		w.elem("ApproximateNumberOfMessagesToMove", strconv.FormatInt(r.ApproximateNumberOfMessagesToMove, 10))
		w.elemOpt("FailureReason", r.FailureReason)
		w.elem("StartedTimestamp", strconv.FormatInt(r.StartedTimestamp, 10))
		w.close("ListMessageMoveTasksResultEntry")
	}
}

// taskHandleDoc is what a TaskHandle encodes: like AWS's, base64 of a JSON
// object naming the task and its source queue, so a cancel can tell an
// unknown source (404 SourceArn) from an unknown task (404 Task).
type taskHandleDoc struct {
	TaskID    string `json:"taskId"`
	SourceArn string `json:"sourceArn"`
}

func (h *Handler) taskHandle(t *engine.MoveTask) string {
	return base64.StdEncoding.EncodeToString(marshalJSON(taskHandleDoc{TaskID: t.ID, SourceArn: h.queueARN(t.Source)}))
}

// decodeTaskHandle reverses taskHandle. ok is false for anything that is not
// base64 of a JSON object with a non-empty taskId and an SQS queue ARN as
// sourceArn (which need not name a queue of this server).
func decodeTaskHandle(s string) (taskID, sourceArn string, ok bool) {
	if s == "" || len(s) > maxTaskHandleLength {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", "", false
	}
	var doc struct {
		TaskID    *string `json:"taskId"`
		SourceArn *string `json:"sourceArn"`
	}
	if json.Unmarshal(raw, &doc) != nil || !isJSONObject(string(raw)) || doc.TaskID == nil || doc.SourceArn == nil {
		return "", "", false
	}
	if *doc.TaskID == "" || !isQueueARN(*doc.SourceArn) {
		return "", "", false
	}
	return *doc.TaskID, *doc.SourceArn, true
}

// isQueueARN reports whether s has the shape arn:<partition>:sqs:<region>:<account>:<name>.
func isQueueARN(s string) bool {
	_, _, _, ok := splitQueueARN(s)
	return ok
}

// arnQueue resolves a move task ARN parameter to a queue name. A malformed
// ARN is InvalidParameterValue; a well-formed one that names no queue here
// (another account or region, or an unknown name) is the 404 naming param.
// Existence is checked by the engine call that follows; the allow-list
// here.
func (c *call) arnQueue(arn, param string) (string, *apiError) {
	if !isQueueARN(arn) {
		return "", errParam(arn, param, "Invalid ARN.")
	}
	name, ok := c.h.queueNameFromARN(arn)
	if !ok {
		return "", errResourceNotFound(param)
	}
	return name, c.authorize(name)
}

func (c *call) startMessageMoveTask() (output, *apiError) {
	var in startMoveTaskInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	if in.SourceArn == "" {
		return nil, errMissing(paramSourceArn)
	}
	if err := checkRange(in.MaxNumberOfMessagesPerSecond, paramMoveRate, 1, engine.MaxMoveRate, msgMoveRateRange); err != nil {
		return nil, err
	}
	src, err := c.arnQueue(in.SourceArn, paramSourceArn)
	if err != nil {
		return nil, err
	}
	spec := engine.MoveTaskSpec{Source: src}
	if in.DestinationArn != "" {
		dst, err := c.arnQueue(in.DestinationArn, paramDestinationArn)
		if err != nil {
			return nil, err
		}
		if dst == src {
			return nil, errParam(in.DestinationArn, paramDestinationArn, msgSameSourceAndDest)
		}
		spec.Destination = dst
	} else if c.restricted() {
		return nil, errAccessDenied("original source queues")
	}
	if in.MaxNumberOfMessagesPerSecond.Set {
		// The engine marks the rate as chosen (RateSet) whenever it is not
		// 0, and 0 was rejected above.
		spec.Rate = int(in.MaxNumberOfMessagesPerSecond.V)
	}
	tk, serr := c.h.eng.StartMoveTask(spec)
	if serr != nil {
		aerr := mapEngineErr(serr, errDetail{queue: src, sourceArn: in.SourceArn, destArn: in.DestinationArn})
		if active := (*engine.ActiveTaskError)(nil); errors.As(serr, &active) && active.Task.Status == engine.TaskPaused {
			// AWS's text ("There is already a task running") would send
			// an operator looking for a task that moves nothing, held by
			// a safety rule until someone resumes or cancels it.
			aerr.msg += fmt.Sprintf(" The active task is PAUSED (%s): cancel it with CancelMessageMoveTask (its TaskHandle is in ListMessageMoveTasks) or resume it with `sluice dlq resume %s`.",
				active.Task.FailureReason, active.Task.ID)
		}
		return nil, aerr
	}
	return &startMoveTaskOutput{TaskHandle: c.h.taskHandle(&tk)}, nil
}

func (c *call) cancelMessageMoveTask() (output, *apiError) {
	var in cancelMoveTaskInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	if in.TaskHandle == "" {
		return nil, errMissing(paramTaskHandle)
	}
	id, arn, ok := decodeTaskHandle(in.TaskHandle)
	if !ok {
		return nil, errText(kindInvalidParameter, msgTaskHandleInvalid)
	}
	src, ok := c.h.queueNameFromARN(arn)
	if !ok {
		return nil, errResourceNotFound(paramSourceArn)
	}
	if err := c.authorize(src); err != nil {
		return nil, err
	}
	if _, err := c.h.eng.Config(src); err != nil {
		return nil, mapEngineErr(err, errDetail{queue: src, sourceArn: arn})
	}
	// A handle whose task belongs to another source is as unknown as one
	// whose task does not exist.
	if tk, err := c.h.eng.GetMoveTask(id); err != nil || tk.Source != src {
		return nil, errText(kindResourceNotFound, msgTaskDoesNotExist)
	}
	tk, cerr := c.h.eng.CancelMoveTask(id)
	if cerr != nil {
		return nil, mapEngineErr(cerr, errDetail{queue: src, sourceArn: arn})
	}
	return &cancelMoveTaskOutput{ApproximateNumberOfMessagesMoved: int64(tk.Moved)}, nil
}

func (c *call) listMessageMoveTasks() (output, *apiError) {
	var in listMoveTasksInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	if in.SourceArn == "" {
		return nil, errMissing(paramSourceArn)
	}
	if err := checkRange(in.MaxResults, "MaxResults", 1, maxMoveTasksListed, msgMoveMaxResults); err != nil {
		return nil, err
	}
	src, err := c.arnQueue(in.SourceArn, paramSourceArn)
	if err != nil {
		return nil, err
	}
	tasks, lerr := c.h.eng.MoveTasks(src) // newest first
	if lerr != nil {
		return nil, mapEngineErr(lerr, errDetail{queue: src, sourceArn: in.SourceArn})
	}
	limit := 1
	if in.MaxResults.Set {
		limit = int(in.MaxResults.V)
	}
	out := &listMoveTasksOutput{Results: []moveTaskEntry{}}
	for i := range tasks[:min(limit, len(tasks))] {
		out.Results = append(out.Results, c.h.moveTaskEntry(&tasks[i]))
	}
	return out, nil
}

// moveTaskEntry renders a task as ListMessageMoveTasks shows it: the handle
// only while the task can be cancelled (RUNNING, and Sluice's PAUSED), the
// destination only if one was given, the rate only if the caller chose it.
func (h *Handler) moveTaskEntry(t *engine.MoveTask) moveTaskEntry {
	e := moveTaskEntry{
		Status:                            t.Status,
		SourceArn:                         h.queueARN(t.Source),
		ApproximateNumberOfMessagesMoved:  int64(t.Moved),
		ApproximateNumberOfMessagesToMove: int64(t.ToMove),
		FailureReason:                     t.FailureReason,
		StartedTimestamp:                  t.StartedAt.UnixMilli(),
	}
	if t.Status == engine.TaskRunning || t.Status == engine.TaskPaused {
		e.TaskHandle = h.taskHandle(t)
	}
	if t.Destination != "" {
		e.DestinationArn = h.queueARN(t.Destination)
	}
	if t.RateSet {
		rate := t.Rate
		e.MaxNumberOfMessagesPerSecond = &rate
	}
	return e
}
