package engine

import "sort"

// DeadLetterTargeter may be implemented by a DeadLetterRouter to say,
// without a message in hand, which queues a Routed source's dead letters
// can reach (for AMQP: every queue bound, directly or through other
// exchanges, to the source's dead-letter exchange). Those queues then count
// as dead-letter queues everywhere a DeadLetterPolicy's Target does:
// DeadLetterSources, DeadLetterQueues, and so move tasks (redrive), the
// admin API, metrics, alerts and the advisor. The engine calls it without
// any queue lock held.
type DeadLetterTargeter interface {
	DeadLetterTargets(source string) []string
}

// DeadLetterRouteLister may be implemented by a DeadLetterRouter that
// routes the dead letters of queues outside this engine too (a cluster's
// shard 0, whose AMQP topology routes those of every shard's queues with a
// dead-letter exchange): DeadLetterRoutes maps each queue their dead
// letters can reach to those sources. With Options.SourcesElsewhere, the
// sources it names that are not this engine's count as sources of this
// engine's queues it names. The engine calls it without any queue lock
// held.
type DeadLetterRouteLister interface {
	DeadLetterRoutes() map[string][]string
}

// DeadLetterQueues returns every dead-letter queue with its sources,
// sorted: the queues some queue's DeadLetterPolicy names as Target, and
// the queues a Routed policy reaches (when the router is a
// DeadLetterTargeter). A Routed source does not count as its own
// dead-letter queue (a dead-letter exchange bound back to its source).
// With Options.SourcesElsewhere, a queue of this engine that sources
// elsewhere name counts too, with those sources (a dead-letter queue whose
// sources live on other shards gets its DLQ alerts, metrics and advice
// here); when they cannot be read, it is logged and they are left out.
func (e *Engine) DeadLetterQueues() map[string][]string {
	out, err := e.deadLetterQueues(false)
	if err != nil {
		e.log.Warn("cannot read the dead-letter sources of other shards; listing this shard's alone", "err", err)
	}
	return out
}

// deadLetterQueues is DeadLetterQueues, with the error of
// Options.SourcesElsewhere (out then holds this engine's sources alone),
// asked fresh or not.
func (e *Engine) deadLetterQueues(fresh bool) (map[string][]string, error) {
	out := make(map[string][]string)
	var routed []string
	for _, q := range e.allQueues() {
		q.mu.Lock()
		if d := q.cfg.DeadLetter; d != nil && !q.deleted {
			switch {
			case d.Routed:
				routed = append(routed, q.name)
			case d.Target != "":
				out[d.Target] = append(out[d.Target], q.name)
			}
		}
		e.unlockAndInsertCopies(q)
	}
	if t, ok := e.router.(DeadLetterTargeter); ok {
		for _, src := range routed {
			for _, dlq := range t.DeadLetterTargets(src) {
				if dlq != src {
					out[dlq] = append(out[dlq], src)
				}
			}
		}
	}
	var err error
	if l, ok := e.router.(DeadLetterRouteLister); ok && e.sourcesElsewhere != nil {
		// A cluster's shard 0: the sources on other shards that its
		// router routes the dead letters of (to queues of this engine).
		for dlq, srcs := range l.DeadLetterRoutes() {
			if q, _ := e.lookup(dlq); q == nil {
				continue
			}
			for _, src := range srcs {
				if s, _ := e.lookup(src); s == nil {
					out[dlq] = append(out[dlq], src)
				}
			}
		}
	}
	if e.sourcesElsewhere != nil {
		var other map[string][]string
		if other, err = e.sourcesElsewhere(fresh); err == nil {
			for dlq, srcs := range other {
				if q, _ := e.lookup(dlq); q != nil {
					out[dlq] = append(out[dlq], srcs...)
				}
			}
		}
	}
	for k, v := range out {
		sort.Strings(v)
		out[k] = dedupSorted(v)
	}
	return out, err
}

func dedupSorted(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// DeadLetterSourcer may be implemented by a DeadLetterRouter to name the
// queue a message in a dead-letter queue came from when the engine did not
// record it itself: a message a client published into the DLQ with a
// dead-letter history of its own (AMQP x-death, e.g. moved over from
// RabbitMQ). A redrive without a destination then returns such messages to
// that queue. It is called with dlq's lock held: it must be fast and must
// not call the Engine. "" means unknown.
type DeadLetterSourcer interface {
	DeadLetterSource(dlq string, envelope []byte) string
}

// redriveDestinationLocked is where m, in dead-letter queue q, goes: the
// task's destination; else the queue the engine recorded it came from;
// else, through the router, the queue its own history names.
func (e *Engine) redriveDestinationLocked(q *queue, dest string, m *message) string {
	if d := destinationOf(dest, m); d != "" {
		return d
	}
	if s, ok := e.router.(DeadLetterSourcer); ok {
		return s.DeadLetterSource(q.name, m.envelope())
	}
	return ""
}
