// Package dedup has Deduper implementations for package worker: Memory,
// for a single process, and SQL, shared by every worker that can reach the
// same database.
package dedup

import (
	"context"
	"sync"
	"time"

	"github.com/sluicemq/sluice/worker"
)

// Memory is an in-memory Deduper whose marks expire after a TTL. It
// only sees what its own process handled and forgets it on restart: it
// catches a lost delete or a redrive handled by the same process, not a
// copy handled by another worker. Use SQL for that.
type Memory struct {
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	marks  map[string]time.Time // key → expiry
	sweepN int                  // marks since the last sweep
}

var _ worker.Deduper = (*Memory)(nil)

// NewMemory returns a Memory whose marks last ttl (at least a second).
// Choose ttl longer than the time a message can spend being retried,
// dead-lettered and redriven: the queue's retention period is a safe
// bound.
func NewMemory(ttl time.Duration) *Memory {
	return &Memory{ttl: max(ttl, time.Second), now: time.Now, marks: map[string]time.Time{}}
}

// Seen reports whether key was marked within the TTL.
func (d *Memory) Seen(_ context.Context, key string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	exp, ok := d.marks[key]
	if ok && !d.now().Before(exp) {
		delete(d.marks, key)
		ok = false
	}
	return ok, nil
}

// Mark records key for the TTL. Expired marks are swept every so often,
// so memory stays proportional to the marks of one TTL.
func (d *Memory) Mark(_ context.Context, key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	d.marks[key] = now.Add(d.ttl)
	if d.sweepN++; d.sweepN >= 1024 && d.sweepN >= len(d.marks)/2 {
		d.sweepN = 0
		for k, exp := range d.marks {
			if !now.Before(exp) {
				delete(d.marks, k)
			}
		}
	}
	return nil
}

// Len returns the number of marks held, expired or not.
func (d *Memory) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.marks)
}
