package engine

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// Move tasks (redrive). A task walks a snapshot of its source's matching
// messages, oldest first, and moves them in small batches paced by a token
// bucket. Each batch is one durable store write that deletes the messages
// from the source, writes them into their destinations and records the
// task's progress, so a crash never loses a message nor miscounts one.
//
// Task records live under "T" + id as versioned JSON: they are small and
// rare, and JSON keeps them readable with a store dump.
const prefixTask = 'T'

// taskTable holds every known task. Its mutex is a leaf: never held while
// taking a queue lock.
type taskTable struct {
	mu       sync.Mutex
	byID     map[string]*task
	bySource map[string][]*task // newest first
}

type task struct {
	MoveTask
	UpTo uint64 `json:"upTo"` // only messages with a lower sequence number move
	wake chan struct{}
	win  refillWindow // guarded by taskTable.mu; not persisted
	// batch is held by moveBatch from its start until its moved copies
	// are published (or the batch failed), so pauseMove can wait for a
	// batch in progress. Never taken with taskTable.mu or a queue lock
	// held.
	batch sync.Mutex
}

// taskRecord is the persisted form.
type taskRecord struct {
	V    int      `json:"v"`
	Task MoveTask `json:"task"`
	UpTo uint64   `json:"upTo"`
}

func (t *taskTable) init() {
	t.byID = make(map[string]*task)
	t.bySource = make(map[string][]*task)
}

func (t *taskTable) add(tk *task) {
	t.byID[tk.ID] = tk
	t.bySource[tk.Source] = append([]*task{tk}, t.bySource[tk.Source]...)
}

// active returns the source's task that is not finished, if any.
func (t *taskTable) activeLocked(source string) *task {
	for _, tk := range t.bySource[source] {
		switch tk.Status {
		case TaskRunning, TaskCancelling, TaskPaused:
			return tk
		}
	}
	return nil
}

func taskKey(id string) []byte { return append([]byte{prefixTask}, id...) }

func encodeTask(tk *task) []byte {
	b, _ := json.Marshal(taskRecord{V: 1, Task: tk.MoveTask, UpTo: tk.UpTo})
	return b
}

// persistTask writes the task's record durably and waits for it. The
// record is encoded and handed to the store under the table lock, as every
// write of a task record is (transition, moveBatch): so records reach the
// store in the order the task changed, and a record encoded before a
// change can never land after it.
func (e *Engine) persistTask(tk *task) error {
	e.tasks.mu.Lock()
	var b store.Batch
	b.Set(taskKey(tk.ID), encodeTask(tk))
	p, err := e.write(&b, true)
	e.tasks.mu.Unlock()
	if err != nil {
		return err
	}
	return e.wait(p)
}

// isDeadLetterQueue reports whether some queue's RedrivePolicy names
// name, here or on another shard (Options.SourcesElsewhere); ErrUnavailable
// when none here does and the other shards' could not be read.
func (e *Engine) isDeadLetterQueue(name string) (bool, error) {
	all, err := e.deadLetterQueues(true)
	switch {
	case len(all[name]) > 0:
		return true, nil
	case err != nil:
		// Its sources may be on another shard that did not answer: a
		// retry may find them, so not ErrNotDeadLetterQueue.
		return false, fmt.Errorf("%w: the dead-letter sources of other shards could not be read: %v", ErrUnavailable, err)
	}
	return false, nil
}

// coldCandidatesLocked calls fn for each cold message that a task with
// filter f would move (see candidatesLocked), reading the store without
// loading the messages.
func (q *queue) coldCandidatesLocked(f *Filter, upTo uint64, now int64, keepBody bool, fn func(m *message)) error {
	return q.scanColdLocked(0, now, keepBody, func(m *message, _ int) error {
		if m.seq >= upTo {
			return store.ErrStopScan
		}
		if m.state != stateInFlight && f.matches(m) {
			fn(m)
		}
		return nil
	})
}

// candidates lists the source's messages in memory that a task with spec
// would move now: matching, below upTo, not in flight (a consumer holds
// those).
func (q *queue) candidatesLocked(f *Filter, upTo uint64) []*message {
	var out []*message
	for _, s := range q.sortedSeqsLocked(0) {
		if s >= upTo {
			break
		}
		m := q.msgs[s]
		if m.state != stateInFlight && f.matches(m) {
			out = append(out, m)
		}
	}
	return out
}

// destinationOf is where m goes: the task's destination, or the queue it
// was dead-lettered from.
func destinationOf(dest string, m *message) string {
	if dest != "" {
		return dest
	}
	if m.ext != nil && m.ext.dead != nil {
		return m.ext.dead.SourceQueue
	}
	return m.deadLetterSource()
}

func (e *Engine) checkMoveSpec(spec *MoveTaskSpec) error {
	src, err := e.lookup(spec.Source)
	if err != nil {
		return err
	}
	if dlq, err := e.isDeadLetterQueue(spec.Source); err != nil {
		return err
	} else if !dlq {
		return ErrNotDeadLetterQueue
	}
	if spec.Destination != "" {
		d, err := e.lookup(spec.Destination)
		switch {
		case err == nil:
			if d.isFIFO != src.isFIFO {
				return &ConfigError{Setting: "DestinationArn", Reason: "destination must be the same type as the source"}
			}
		case e.heldElsewhere(spec.Destination):
			// On another shard: its messages go as transfers, whose
			// import checks the type (transfer.go).
		default:
			return ErrDestinationNotFound
		}
	}
	if spec.Rate == 0 {
		spec.Rate = DefaultMoveRate
	} else {
		spec.RateSet = true
	}
	if spec.Rate < 1 || spec.Rate > MaxMoveRate {
		return &ConfigError{Setting: "MaxNumberOfMessagesPerSecond", Reason: fmt.Sprintf("must be between 1 and %d", MaxMoveRate)}
	}
	if spec.SafetyWindow == 0 {
		spec.SafetyWindow = DefaultSafetyWindow
	}
	if spec.SafetyThreshold == 0 {
		spec.SafetyThreshold = DefaultSafetyThreshold
	}
	if spec.SafetyWindow < 0 {
		return &ConfigError{Setting: "SafetyStop", Reason: "window must not be negative"}
	}
	if spec.SafetyThreshold < 0 {
		spec.SafetyThreshold = 0 // disabled on purpose
	}
	return nil
}

// DryRunMoveTask reports what StartMoveTask would move, and where.
func (e *Engine) DryRunMoveTask(spec MoveTaskSpec) (DryRun, error) {
	if err := e.checkMoveSpec(&spec); err != nil {
		return DryRun{}, err
	}
	q, err := e.lockQueue(spec.Source)
	if err != nil {
		return DryRun{}, err
	}
	defer e.unlockAndInsertCopies(q)
	out := DryRun{ByDestination: map[string]int{}}
	count := func(m *message) {
		out.Total++
		out.ByDestination[e.redriveDestinationLocked(q, spec.Destination, m)]++
		if len(out.Sample) < moveTaskSampleSize {
			out.Sample = append(out.Sample, q.viewLocked(m))
		}
	}
	upTo := q.nextSeq.Load()
	for _, m := range q.candidatesLocked(&spec.Filter, upTo) {
		count(m)
	}
	if err := q.coldCandidatesLocked(&spec.Filter, upTo, e.now(), true, count); err != nil {
		return DryRun{}, err
	}
	return out, nil
}

func newTaskID() string {
	var b [16]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return hex.EncodeToString(b[:])
}

// StartMoveTask starts a redrive. Only one task may be active (RUNNING,
// CANCELLING or PAUSED) per source: a start while one is returns an
// *ActiveTaskError naming it (errors.Is ErrTaskRunning). Tasks are persisted: after a restart a
// RUNNING task resumes.
func (e *Engine) StartMoveTask(spec MoveTaskSpec) (MoveTask, error) {
	if err := e.checkMoveSpec(&spec); err != nil {
		return MoveTask{}, err
	}
	if err := e.admit(); err != nil {
		return MoveTask{}, err
	}
	q, err := e.lockQueue(spec.Source)
	if err != nil {
		return MoveTask{}, err
	}
	upTo := q.nextSeq.Load()
	toMove := len(q.candidatesLocked(&spec.Filter, upTo))
	err = q.coldCandidatesLocked(&spec.Filter, upTo, e.now(), false, func(*message) { toMove++ })
	e.unlockAndInsertCopies(q)
	if err != nil {
		return MoveTask{}, err
	}
	now := e.clock.Now()
	tk := &task{
		MoveTask: MoveTask{
			ID: newTaskID(), Source: spec.Source, Destination: spec.Destination,
			Rate: spec.Rate, RateSet: spec.RateSet, Filter: spec.Filter,
			Status: TaskRunning, ToMove: toMove, StartedAt: now, UpdatedAt: now,
			SafetyWindow: spec.SafetyWindow, SafetyThreshold: spec.SafetyThreshold,
		},
		UpTo: upTo,
		wake: make(chan struct{}, 1),
	}
	e.tasks.mu.Lock()
	if cur := e.tasks.activeLocked(spec.Source); cur != nil {
		active := cur.MoveTask
		active.ReturnedClasses = slices.Clone(active.ReturnedClasses)
		e.tasks.mu.Unlock()
		return MoveTask{}, &ActiveTaskError{Task: active}
	}
	e.tasks.add(tk)
	e.tasks.mu.Unlock()
	if err := e.persistTask(tk); err != nil {
		return MoveTask{}, err
	}
	e.pruneTasks(spec.Source)
	e.log.Info("move task started", "task", tk.ID, "source", tk.Source, "destination", tk.Destination, "rate", tk.Rate, "to_move", toMove)
	e.wg.Add(1)
	go e.runMove(tk)
	return e.snapshotTask(tk), nil
}

func (e *Engine) snapshotTask(tk *task) MoveTask {
	e.tasks.mu.Lock()
	defer e.tasks.mu.Unlock()
	m := tk.MoveTask
	m.ReturnedClasses = slices.Clone(m.ReturnedClasses)
	return m
}

// transition changes a task's status and saves it. next, called under
// the table lock, returns the new status (or an error: no change). The
// record is written under the same lock (see persistTask), and transition
// returns once it is durable: an operator told "paused" has a paused task
// after any crash. If the write fails, the engine has failed and the error
// is returned.
func (e *Engine) transition(tk *task, reason string, next func(*task) (string, error)) error {
	e.tasks.mu.Lock()
	status, err := next(tk)
	if err != nil {
		e.tasks.mu.Unlock()
		return err
	}
	tk.Status = status
	if reason != "" {
		tk.FailureReason = reason
	}
	tk.UpdatedAt = e.clock.Now()
	moved := tk.Moved
	var b store.Batch
	b.Set(taskKey(tk.ID), encodeTask(tk))
	p, err := e.write(&b, true)
	e.tasks.mu.Unlock()
	select {
	case tk.wake <- struct{}{}:
	default:
	}
	if err == nil {
		err = e.wait(p)
	}
	if err != nil {
		e.log.Error("cannot persist move task", "task", tk.ID, "status", status, "err", err)
		return err
	}
	e.log.Info("move task "+strings.ToLower(status), "task", tk.ID, "source", tk.Source, "moved", moved, "reason", reason)
	return nil
}

// setStatus is the engine's own transition (the task goroutine, the
// safety stop) of a task that is not finished yet, and only from one of
// the given statuses (any unfinished one when from is empty). A failure is
// only logged: the engine has failed and the task stops with it.
func (e *Engine) setStatus(tk *task, status, reason string, from ...string) {
	_ = e.transition(tk, reason, func(tk *task) (string, error) {
		switch {
		case len(from) > 0 && !slices.Contains(from, tk.Status):
			return "", ErrTaskNotRunning
		case tk.Status != TaskRunning && tk.Status != TaskPaused && tk.Status != TaskCancelling:
			return "", ErrTaskNotRunning
		}
		return status, nil
	})
}

// findTask returns the task with that id.
func (e *Engine) findTask(id string) (*task, error) {
	e.tasks.mu.Lock()
	tk := e.tasks.byID[id]
	e.tasks.mu.Unlock()
	if tk == nil {
		return nil, ErrTaskNotFound
	}
	return tk, nil
}

// CancelMoveTask cancels a RUNNING or PAUSED task; messages already moved
// stay moved.
func (e *Engine) CancelMoveTask(id string) (MoveTask, error) {
	tk, err := e.findTask(id)
	if err != nil {
		return MoveTask{}, err
	}
	err = e.transition(tk, "", func(tk *task) (string, error) {
		switch tk.Status {
		case TaskRunning:
			return TaskCancelling, nil
		case TaskPaused:
			return TaskCancelled, nil
		}
		return "", ErrTaskNotRunning
	})
	if err != nil {
		return MoveTask{}, err
	}
	return e.snapshotTask(tk), nil
}

// PauseMoveTask pauses a RUNNING task (an operator's pause); ResumeMoveTask
// continues it.
func (e *Engine) PauseMoveTask(id string) (MoveTask, error) {
	tk, err := e.findTask(id)
	if err != nil {
		return MoveTask{}, err
	}
	err = e.transition(tk, "paused by an operator", func(tk *task) (string, error) {
		if tk.Status != TaskRunning {
			return "", ErrTaskNotRunning
		}
		return TaskPaused, nil
	})
	if err != nil {
		return MoveTask{}, err
	}
	// A batch in progress ends first (none starts after the pause).
	tk.batch.Lock()
	defer tk.batch.Unlock()
	return e.snapshotTask(tk), nil
}

// ResumeMoveTask resumes a PAUSED task.
func (e *Engine) ResumeMoveTask(id string) (MoveTask, error) {
	tk, err := e.findTask(id)
	if err != nil {
		return MoveTask{}, err
	}
	err = e.transition(tk, "", func(tk *task) (string, error) {
		if tk.Status != TaskPaused {
			return "", ErrTaskNotRunning
		}
		// A resume starts a fresh safety count: the operator says it
		// is fixed.
		tk.Returned = 0
		tk.ReturnedClasses = nil
		tk.FailureReason = ""
		tk.StopRule = ""
		tk.win = refillWindow{}
		return TaskRunning, nil
	})
	if err != nil {
		return MoveTask{}, err
	}
	return e.snapshotTask(tk), nil
}

// MoveTasks lists the tasks of a source, newest first (at most
// MoveTasksKeptPerSource are kept).
func (e *Engine) MoveTasks(source string) ([]MoveTask, error) {
	if _, err := e.lookup(source); err != nil {
		return nil, err
	}
	e.tasks.mu.Lock()
	defer e.tasks.mu.Unlock()
	var out []MoveTask
	for _, tk := range e.tasks.bySource[source] {
		m := tk.MoveTask
		m.ReturnedClasses = slices.Clone(m.ReturnedClasses)
		out = append(out, m)
	}
	return out, nil
}

// GetMoveTask returns one task.
func (e *Engine) GetMoveTask(id string) (MoveTask, error) {
	e.tasks.mu.Lock()
	tk := e.tasks.byID[id]
	e.tasks.mu.Unlock()
	if tk == nil {
		return MoveTask{}, ErrTaskNotFound
	}
	return e.snapshotTask(tk), nil
}

// wakeTasks wakes every task goroutine, so that a task held by the disk
// watermark looks again.
func (e *Engine) wakeTasks() {
	e.tasks.mu.Lock()
	defer e.tasks.mu.Unlock()
	for _, tk := range e.tasks.byID {
		select {
		case tk.wake <- struct{}{}:
		default:
		}
	}
}

// pruneTasks forgets finished tasks beyond the newest
// MoveTasksKeptPerSource of a source.
func (e *Engine) pruneTasks(source string) {
	e.tasks.mu.Lock()
	list := e.tasks.bySource[source]
	var b store.Batch
	if len(list) > MoveTasksKeptPerSource {
		for _, tk := range list[MoveTasksKeptPerSource:] {
			delete(e.tasks.byID, tk.ID)
			b.Delete(taskKey(tk.ID))
		}
		e.tasks.bySource[source] = list[:MoveTasksKeptPerSource]
	}
	e.tasks.mu.Unlock()
	if b.Len() > 0 {
		_, _ = e.write(&b, false) // a failure fails the engine; the records are pruned again next time
	}
}

// noteReturn is told when a message moved by a task is dead-lettered
// again. Within the task's safety window it counts as a return; at the
// threshold the task pauses and says why.
func (e *Engine) noteReturnLocked(tk *task, r *RedriveInfo, f *FailureRecord, at time.Time) bool {
	if at.Sub(r.At) > tk.SafetyWindow || tk.SafetyThreshold == 0 {
		return false
	}
	tk.Returned++
	if f != nil && f.ErrorClass != "" && !slices.Contains(tk.ReturnedClasses, f.ErrorClass) {
		tk.ReturnedClasses = append(tk.ReturnedClasses, f.ErrorClass)
	}
	return tk.Status == TaskRunning && tk.Returned >= tk.SafetyThreshold
}

// runMove is a task's goroutine.
func (e *Engine) runMove(tk *task) {
	defer e.wg.Done()
	var tokens float64 = 1
	last := e.clock.Now()
	timer := e.clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		e.tasks.mu.Lock()
		status, rate, started := tk.Status, tk.Rate, tk.StartedAt
		e.tasks.mu.Unlock()
		switch status {
		case TaskCancelling:
			e.setStatus(tk, TaskCancelled, "")
			return
		case TaskPaused:
			select {
			case <-tk.wake:
				last = e.clock.Now()
				continue
			case <-e.done:
				return
			}
		case TaskRunning:
		default:
			return
		}
		if e.admit() != nil {
			// The disk watermark: moving copies messages, so the task
			// holds until SetAdmission(nil) wakes it.
			select {
			case <-tk.wake:
				last = e.clock.Now()
				continue
			case <-e.done:
				return
			}
		}
		now := e.clock.Now()
		if now.Sub(started) > MaxMoveTaskDuration {
			e.setStatus(tk, TaskFailed, "Task exceeded the maximum duration of 36 hours.")
			return
		}
		tokens = min(float64(rate), tokens+now.Sub(last).Seconds()*float64(rate))
		last = now
		if tokens < 1 {
			wait := time.Duration((1 - tokens) / float64(rate) * float64(time.Second))
			timer.Reset(max(wait, time.Millisecond))
			select {
			case <-timer.C():
			case <-tk.wake:
			case <-e.done:
				return
			}
			continue
		}
		n := min(int(tokens), MaxBatch)
		moved, done, reason := e.moveBatch(tk, n)
		tokens -= float64(moved)
		if reason != "" {
			e.setStatus(tk, TaskFailed, reason)
			return
		}
		if done {
			e.setStatus(tk, TaskCompleted, "")
			return
		}
		if moved == 0 {
			tokens = 0
		}
	}
}

// moveBatch moves up to n of the task's remaining messages. done reports
// that nothing is left; reason is set when the task must fail.
func (e *Engine) moveBatch(tk *task, n int) (moved int, done bool, reason string) {
	tk.batch.Lock()
	defer tk.batch.Unlock()
	q, err := e.lockQueue(tk.Source)
	if err != nil {
		return 0, false, "AWS.SimpleQueueService.NonExistentQueue"
	}
	// A pause or cancel saved since runMove looked: no batch starts after
	// it (one already past this point completes, see pauseMove).
	e.tasks.mu.Lock()
	running := tk.Status == TaskRunning
	e.tasks.mu.Unlock()
	if !running {
		e.unlockAndInsertCopies(q)
		return 0, false, ""
	}
	now := e.now()
	var b store.Batch
	q.advanceLocked(now, &b)
	var moves []pendingCopy
	transfers := 0 // messages moved out as transfers (to other shards)
	cands := q.candidatesLocked(&tk.Filter, tk.UpTo)
	// The source's cold part is loaded as the task reaches it, a window
	// at a time (messages the filter leaves stay in memory, as loaded).
	for i := 0; i < 16 && len(cands) < n && q.cold.on && q.cold.from < tk.UpTo && e.failed.Load() == nil; i++ {
		q.refillLocked(now)
		q.advanceLocked(now, &b)
		cands = q.candidatesLocked(&tk.Filter, tk.UpTo)
	}
	if len(cands) == 0 {
		e.writeUnlock(q, &b) // what advanceLocked changed
		return 0, !(q.cold.on && q.cold.from < tk.UpTo), ""
	}
	for _, m := range cands[:min(n, len(cands))] {
		dname := e.redriveDestinationLocked(q, tk.Destination, m)
		d, err := e.lookup(dname)
		if err != nil && dname != "" && e.heldElsewhere(dname) {
			// On another shard: a transfer, moved there by the mover
			// (its import waits for room, as below).
			e.redriveTransferLocked(q, m, dname, tk.ID, now, &b)
			transfers++
			continue
		}
		if err != nil || d == q {
			reason = "AWS.SimpleQueueService.NonExistentQueue"
			break
		}
		if d.isFIFO != q.isFIFO {
			reason = "destination queue type does not match the source"
			break
		}
		size := int64(m.bodyLen)
		if !d.room.reserve(d.snap.Load(), size, true) {
			// DLQ-97: the destination is at its length limit. The
			// message stays in the DLQ; the task tries again at its
			// next token, so it waits for room instead of pushing the
			// destination's messages out or past its limit.
			break
		}
		mv := e.redriveOutLocked(q, m, d, tk.ID, now, &b)
		mv.size = size
		moves = append(moves, mv)
	}
	// The progress record is encoded and written under the table lock
	// (see persistTask): a pause or cancel saved meanwhile is either
	// already in it or written after it, never overwritten by it.
	e.tasks.mu.Lock()
	tk.Moved += len(moves) + transfers
	tk.UpdatedAt = fromNanos(now)
	b.Set(taskKey(tk.ID), encodeTask(tk))
	p, err := e.write(&b, true)
	e.tasks.mu.Unlock()
	if err != nil {
		p = store.Done{Err: err}
	}
	e.scheduleLocked(q)
	e.unlockAndInsertCopiesAfter(q, p)
	// The moved copies become receivable in their destinations only once
	// the batch that moved them is durable: never before (a consumer
	// could receive and delete a copy that a power cut puts back in the
	// DLQ), and never when its sync fails.
	if err := e.insertCopies(moves, p); err != nil {
		return len(moves) + transfers, false, "storage failed"
	}
	if transfers > 0 {
		if err := e.wait(p); err != nil {
			return len(moves) + transfers, false, "storage failed"
		}
	}
	e.noteDrain(tk, len(moves)+transfers, fromNanos(now))
	return len(moves) + transfers, false, reason
}

// redriveOutLocked moves m from q into d as a new message: a new
// MessageId, a fresh receive count and retention clock, at the back of d.
// Its original id and the number of redrives travel in RedriveInfo.
func (e *Engine) redriveOutLocked(q *queue, m *message, d *queue, taskID string, now int64, b *store.Batch) pendingCopy {
	q.dropLocked(m, b)
	n := e.redriveCopyLocked(q, m, taskID, now, d.isFIFO)
	n.seq = d.nextSeq.Add(1) - 1
	d.cold.addPending(n.seq) // not refilled before insertCopies inserts it
	recLen := d.writeCopy(n, b)
	b.Set(movedSeqKey(d.id, q.id), binaryUint64(n.seq))
	return pendingCopy{target: d, m: n, group: m.groupID(), purges: d.purges.Load(), recLen: recLen}
}

// redriveTransferLocked moves m from q, toward dest on another shard, as a
// transfer (transfer.go) in b.
func (e *Engine) redriveTransferLocked(q *queue, m *message, dest, taskID string, now int64, b *store.Batch) {
	q.dropLocked(m, b)
	n := e.redriveCopyLocked(q, m, taskID, now, q.isFIFO)
	e.writeTransferLocked(q, &Transfer{Target: dest, Source: q.name, Redrive: true}, n, now, b)
}

// redriveCopyLocked is the message a redrive of m puts in its
// destination, of type fifo, without its sequence number there.
func (e *Engine) redriveCopyLocked(q *queue, m *message, taskID string, now int64, fifo bool) *message {
	orig, count := FormatID(m.id), 1
	if m.ext != nil && m.ext.redrive != nil {
		orig, count = m.ext.redrive.OriginalMessageID, m.ext.redrive.Count+1
	}
	id := newID()
	body, _ := q.bodyLocked(m) // a failed read fails the engine
	n := &message{
		id:         id,
		body:       body,
		attrs:      m.attrs,
		sender:     m.sender,
		sentAt:     now,
		enqueuedAt: now,
		visibleAt:  now,
		state:      stateVisible,
		hasMD5:     m.hasMD5,
		bodyMD5:    m.bodyMD5,
		prio:       m.prio,
		ext: &messageExt{trace: m.traceHeader(), envelope: m.envelope(),
			redrive: &RedriveInfo{OriginalMessageID: orig, Count: count, TaskID: taskID, At: fromNanos(now)}},
		group: &group{id: m.groupID()},
	}
	if fifo {
		n.dedupID = FormatID(id)
	}
	return n
}

// recoverMoveTasks loads task records. RUNNING tasks resume (their
// snapshot is recomputed from the source), CANCELLING ones finish
// cancelling, PAUSED ones wait.
func (e *Engine) recoverMoveTasks() error {
	var all []*task
	err := e.st.Scan([]byte{prefixTask}, func(k, v []byte) error {
		var r taskRecord
		if err := json.Unmarshal(v, &r); err != nil || r.V != 1 {
			return fmt.Errorf("engine: recover: move task %q: %w", k[1:], errCorrupt)
		}
		all = append(all, &task{MoveTask: r.Task, UpTo: r.UpTo, wake: make(chan struct{}, 1)})
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].StartedAt.Before(all[j].StartedAt) })
	for _, tk := range all {
		if tk.Status == TaskCancelling {
			tk.Status = TaskCancelled
		}
		e.tasks.add(tk)
	}
	return nil
}

func (e *Engine) startRecoveredMoveTasks() {
	e.tasks.mu.Lock()
	var run []*task
	for _, tk := range e.tasks.byID {
		if tk.Status == TaskRunning || tk.Status == TaskPaused {
			run = append(run, tk)
		}
	}
	e.tasks.mu.Unlock()
	for _, tk := range run {
		e.log.Info("move task resumed after restart", "task", tk.ID, "source", tk.Source, "status", tk.Status, "moved", tk.Moved)
		e.wg.Add(1)
		go e.runMove(tk)
	}
}
