package faults

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

const (
	feDLQ    = "fe-dlq"
	feDLQArn = "arn:aws:sqs:us-east-1:000000000000:" + feDLQ
)

// feTask is a move task of the current round and the last change to it
// that was acknowledged.
type feTask struct {
	id      string // the engine's task id (inside the TaskHandle)
	started time.Time
	op      string    // "", "pause" or "cancel": the last acknowledged change
	opAt    time.Time // when its OK arrived
}

// feMoveTasks sends messages to the dead-letter queue and moves them back
// with a move task started over SQS (StartMessageMoveTask, 20 msg/s), which
// it then pauses (admin API), cancels (CancelMessageMoveTask) or leaves
// running. A task left active by an earlier round is cancelled first.
func feMoveTasks(ctx context.Context, r *feRun, b *feBroker, rng *rand.Rand) {
	if !feCancelActive(ctx, r, b) {
		return
	}
	var ids []string
	var entries []types.SendMessageBatchRequestEntry
	for i := range 10 {
		id := fmt.Sprintf("d-%07d", r.seq.Add(1))
		ids = append(ids, id)
		entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(feBody(id))})
		r.moved.Attempt(Send{ID: id, Body: feBody(id)}, time.Now())
	}
	out, err := b.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(b.urls[feDLQ]), Entries: entries})
	if err != nil {
		r.liveError(ctx, "dlq send", err)
		return
	}
	for _, e := range out.Successful {
		i, _ := strconv.Atoi(aws.ToString(e.Id))
		// A move gives the message a new MessageId: none is checked.
		r.moved.Acked(ids[i], "", time.Now())
	}
	st, err := b.client.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(feDLQArn),
		DestinationArn: aws.String("arn:aws:sqs:us-east-1:000000000000:" + feStd), MaxNumberOfMessagesPerSecond: aws.Int32(20)})
	if err != nil {
		r.liveError(ctx, "start move task", err)
		return
	}
	tk := feTask{id: feTaskID(aws.ToString(st.TaskHandle)), started: time.Now()}
	r.tasksStarted.Add(1)
	r.mu.Lock()
	r.tasks = append(r.tasks, tk)
	idx := len(r.tasks) - 1
	r.mu.Unlock()
	SleepCtx(ctx, time.Duration(20+rng.IntN(200))*time.Millisecond)
	op := []string{"", "pause", "cancel"}[rng.IntN(3)]
	switch op {
	case "pause":
		err = feAdminPost(ctx, b, "/sluice/v1/tasks/"+tk.id+"/pause")
	case "cancel":
		_, err = b.client.CancelMessageMoveTask(ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: st.TaskHandle})
	default:
		return
	}
	if err != nil {
		// The task may have finished its 10 messages already.
		if ctx.Err() == nil && !feTaskOver(b, tk.id) {
			r.liveError(ctx, op+" move task", err)
		}
		return
	}
	r.mu.Lock()
	r.tasks[idx].op, r.tasks[idx].opAt = op, time.Now()
	r.mu.Unlock()
	if op == "pause" {
		r.tasksPaused.Add(1)
	} else {
		r.tasksCancelled.Add(1)
	}
}

// feCancelActive cancels any task an earlier round left running or paused
// (one active task per source); false if it could not.
func feCancelActive(ctx context.Context, r *feRun, b *feBroker) bool {
	out, err := b.client.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(feDLQArn)})
	if err != nil {
		r.liveError(ctx, "list move tasks", err)
		return false
	}
	for _, tk := range out.Results {
		if s := aws.ToString(tk.Status); s == "RUNNING" || s == "PAUSED" {
			if _, err := b.client.CancelMessageMoveTask(ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: tk.TaskHandle}); err != nil {
				r.liveError(ctx, "cancel an earlier move task", err)
				return false
			}
		}
	}
	return true
}

// feTaskID extracts the engine's task id from a TaskHandle (base64 JSON).
func feTaskID(handle string) string {
	b, err := base64.StdEncoding.DecodeString(handle)
	if err != nil {
		return ""
	}
	var doc struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(b, &doc)
	return doc.TaskID
}

// feTaskOver reports whether the task has ended (a pause or cancel is then
// refused, rightly).
func feTaskOver(b *feBroker, id string) bool {
	st, ok := feTaskStatuses(b)[id]
	return ok && st != "RUNNING" && st != "PAUSED" && st != "CANCELLING"
}

// feTaskStatuses lists the source's tasks by id, from the engine (the
// SQS listing names finished tasks without a handle, hence without an id).
func feTaskStatuses(b *feBroker) map[string]string {
	tasks, err := b.srv.Engine().MoveTasks(feDLQ)
	if err != nil {
		return nil
	}
	m := map[string]string{}
	for _, tk := range tasks {
		m[tk.ID] = tk.Status
	}
	return m
}

func feAdminPost(ctx context.Context, b *feBroker, path string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+b.srv.SQSAddr()+path, nil)
	if err != nil {
		return err
	}
	// The admin API refuses a state-changing request that a browser
	// form could send cross-site (#11), as the CLI does.
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", path, resp.Status)
	}
	return nil
}

// feCheckTasks checks the move tasks of the round just cut against the
// restarted broker's stored tasks: a task whose start was acknowledged
// before the cut exists; one whose pause was acknowledged is PAUSED; one
// whose cancel was acknowledged is CANCELLING or CANCELLED. statuses are
// the restarted broker's, taken before feCheck paused anything. The
// round's tasks are then forgotten.
func feCheckTasks(t *testing.T, r *feRun, statuses map[string]string, cut time.Time) []string {
	t.Helper()
	r.mu.Lock()
	tasks := r.tasks
	r.tasks = nil
	r.mu.Unlock()
	if statuses == nil {
		return []string{"cannot list move tasks after the restart"}
	}
	var bad []string
	for _, tk := range tasks {
		if !tk.started.Before(cut) || tk.id == "" {
			continue
		}
		st, ok := statuses[tk.id]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("move task %s: started (acknowledged before the cut) but unknown after it", tk.id))
		case tk.op == "pause" && tk.opAt.Before(cut) && st != "PAUSED":
			bad = append(bad, fmt.Sprintf("move task %s: pause acknowledged before the cut, %s after it", tk.id, st))
		case tk.op == "cancel" && tk.opAt.Before(cut) && st != "CANCELLING" && st != "CANCELLED":
			bad = append(bad, fmt.Sprintf("move task %s: cancel acknowledged before the cut, %s after it", tk.id, st))
		}
	}
	return bad
}
