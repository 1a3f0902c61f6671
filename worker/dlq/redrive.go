package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Store is one transport's dead-letter queue as the console sees it. The
// transports' packages implement it (kafka.DLQ, natsjs.DLQ,
// redisstream.DLQ, pubsub.DLQ).
type Store interface {
	// List returns up to max entries after cursor ("" from the oldest),
	// oldest first, without removing or settling them (a peek), and the
	// cursor after the last one returned. Entries appended later are
	// returned by a later List from that cursor.
	List(ctx context.Context, cursor string, max int) (entries []Entry, next string, err error)
	// Redrive publishes a copy of e where its consumer receives it again
	// (with RedriveFields: context stripped, redrive count + 1), waits
	// for the broker's acknowledgement, and only then removes e from the
	// DLQ, so a crash in between duplicates rather than loses.
	Redrive(ctx context.Context, e Entry) error
}

// Options of a redrive.
type Options struct {
	// Filter selects the entries to redrive; nil: all. Entries it skips
	// stay in the DLQ.
	Filter func(Entry) bool
	// DryRun counts and samples what would be redriven; nothing moves.
	DryRun bool
	// Rate is the most entries redriven per second. 0: 10.
	Rate float64
	// Max is the most entries redriven; 0: no limit.
	Max int
	// SafetyThreshold stops the redrive once this many redriven messages
	// are back in the DLQ (their consumer failed them again: the fix is
	// not in). 0: 1. Negative: no safety stop.
	SafetyThreshold int
	// SafetyWindow is how long the DLQ is watched for re-failures after
	// the last entry is redriven. 0: 5 s.
	SafetyWindow time.Duration
	// Batch is how many entries one List asks for. 0: 100.
	Batch int
	// Progress, if set, is called after each entry redriven.
	Progress func(Entry)
}

// Report is what a redrive did.
type Report struct {
	Scanned  int     // entries looked at
	Matched  int     // entries the filter selected
	Redriven int     // entries moved (0 in a dry run)
	Refailed int     // redriven messages that came back to the DLQ
	Stopped  bool    // the safety stop fired
	Sample   []Entry // up to 10 selected entries (dry run or not)
}

// ErrSafetyStop is returned (wrapped) when the safety stop fires.
var ErrSafetyStop = errors.New("dlq: redrive stopped: redriven messages failed again")

// Redrive moves the entries of s that o.Filter selects back to their
// consumers, at most o.Rate per second, and stops by itself — returning
// an error wrapping ErrSafetyStop — when o.SafetyThreshold of them are
// dead-lettered again. It returns when every entry present at the start
// was looked at and the safety window has passed, or ctx is done.
func Redrive(ctx context.Context, s Store, o Options) (Report, error) {
	if o.Rate < 0 || o.Max < 0 || o.Batch < 0 || o.SafetyWindow < 0 {
		return Report{}, errors.New("dlq: Rate, Max, Batch and SafetyWindow must not be negative")
	}
	if o.Rate == 0 {
		o.Rate = 10
	}
	if o.Batch == 0 {
		o.Batch = 100
	}
	if o.SafetyThreshold == 0 {
		o.SafetyThreshold = 1
	}
	if o.SafetyWindow == 0 {
		o.SafetyWindow = 5 * time.Second
	}
	interval := time.Duration(float64(time.Second) / o.Rate)
	var rep Report
	redriven := map[string]bool{} // origin ids redriven by this run
	cursor := ""
	var last time.Time
	counted := map[string]bool{} // entry ids counted as re-failures
	refailed := func(e Entry) bool {
		if !e.Valid || !redriven[e.Context.OriginID] || e.Context.Redrives == 0 {
			return false
		}
		if !counted[e.ID] {
			counted[e.ID] = true
			rep.Refailed++
		}
		return true
	}
	safety := func() error {
		if o.SafetyThreshold > 0 && rep.Refailed >= o.SafetyThreshold {
			rep.Stopped = true
			return fmt.Errorf("%w (%d of %d redriven came back)", ErrSafetyStop, rep.Refailed, rep.Redriven)
		}
		return nil
	}
	// Scan: everything after cursor, until a List returns nothing new.
	for {
		es, next, err := s.List(ctx, cursor, o.Batch)
		if err != nil {
			return rep, err
		}
		cursor = next
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if refailed(e) {
				if err := safety(); err != nil {
					return rep, err
				}
				continue
			}
			rep.Scanned++
			if o.Filter != nil && !o.Filter(e) {
				continue
			}
			rep.Matched++
			if len(rep.Sample) < 10 {
				rep.Sample = append(rep.Sample, e)
			}
			if o.DryRun || (o.Max > 0 && rep.Redriven >= o.Max) {
				continue
			}
			if wait := time.Until(last.Add(interval)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return rep, ctx.Err()
				case <-t.C:
				}
			}
			last = time.Now()
			if err := s.Redrive(ctx, e); err != nil {
				return rep, fmt.Errorf("dlq: redrive %s: %w", e.ID, err)
			}
			if e.Context.OriginID != "" {
				redriven[e.Context.OriginID] = true
			}
			rep.Redriven++
			if o.Progress != nil {
				o.Progress(e)
			}
			// Re-failures land after this batch: look at once, so the
			// stop comes while entries are still waiting.
			if o.SafetyThreshold > 0 {
				more, _, err := s.List(ctx, cursor, o.Batch)
				if err != nil {
					return rep, err
				}
				for _, m := range more {
					refailed(m)
				}
				if err := safety(); err != nil {
					return rep, err
				}
			}
		}
	}
	if o.DryRun || rep.Redriven == 0 || o.SafetyThreshold < 0 {
		return rep, nil
	}
	// Watch: re-failures land at the end of the DLQ.
	deadline := time.Now().Add(o.SafetyWindow)
	for time.Now().Before(deadline) {
		es, next, err := s.List(ctx, cursor, o.Batch)
		if err != nil {
			return rep, err
		}
		cursor = next
		for _, e := range es {
			if refailed(e) {
				if err := safety(); err != nil {
					return rep, err
				}
			}
		}
		if len(es) == 0 {
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return rep, ctx.Err()
			case <-t.C:
			}
		}
	}
	return rep, nil
}
