package amqp

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/sluicemq/sluice/internal/amqp/wire"
)

// Consumer priorities (basic.consume's x-priority argument, RabbitMQ
// 3.2+): a consumer takes messages only while no consumer of the same
// queue with a higher priority is active, active meaning it has prefetch
// credit left (RabbitMQ: "could receive a message without waiting");
// consumers of equal priority share the messages. A lower-priority
// consumer already waiting for messages in the engine when a higher one
// becomes active again gives up that wait (preempted) and waits for its
// turn. Without x-priority a consumer's priority is 0; as long as every
// consumer of a queue has priority 0, this costs a per-queue lock and a
// cancellable context per engine wait, and a lock per credit flip (every
// wait is registered, so that a consumer with a priority joining later
// can preempt the waits already under way).
//
// State per queue, under its prio.mu (not the topology lock, which
// credit changes would otherwise take on every busy consumer's flip):
// the consumers, whether each is active, and the cancel of each one's
// current engine wait.

// prioLine is a queue's consumer-priority state.
type prioLine struct {
	on   atomic.Bool // some consumer has a priority other than 0
	mu   sync.Mutex
	cons map[*consumer]*prioState
	set  int           // consumers with a priority other than 0
	turn chan struct{} // closed when an active consumer becomes blocked or leaves
}

// prioState is one consumer's, under prioLine.mu.
type prioState struct {
	active bool
	cancel context.CancelFunc // its engine wait, while it waits
}

// consumerPriority reads x-priority: an integer of any tag (RabbitMQ
// takes any integer); anything else counts as 0.
func consumerPriority(args wire.Table) int {
	v, ok := args.Get("x-priority")
	if !ok {
		return 0
	}
	n, isInt := asInt(v)
	if !isInt {
		return 0
	}
	return int(max(min(n, 1<<31-1), -1<<31))
}

// join adds cs, active (it has its credit still to use).
func (p *prioLine) join(cs *consumer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cons == nil {
		p.cons = map[*consumer]*prioState{}
	}
	p.cons[cs] = &prioState{active: true}
	if cs.priority != 0 {
		p.set++
		p.on.Store(true)
	}
	p.preemptBelowLocked(cs.priority)
}

// leave removes cs; consumers waiting behind it may go.
func (p *prioLine) leave(cs *consumer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.cons[cs]; !ok {
		return
	}
	delete(p.cons, cs)
	if cs.priority != 0 {
		p.set--
		p.on.Store(p.set > 0)
	}
	p.wakeLocked()
}

// setActive records whether cs has credit left. Becoming active preempts
// the lower-priority consumers waiting in the engine; becoming blocked
// lets the ones waiting for their turn go.
func (p *prioLine) setActive(cs *consumer, active bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.cons[cs]
	if st == nil || st.active == active {
		return
	}
	st.active = active
	if active {
		p.preemptBelowLocked(cs.priority)
	} else {
		p.wakeLocked()
	}
}

func (p *prioLine) preemptBelowLocked(prio int) {
	if !p.on.Load() {
		return
	}
	for c, st := range p.cons {
		if c.priority < prio && st.cancel != nil {
			st.cancel()
			st.cancel = nil
		}
	}
}

func (p *prioLine) wakeLocked() {
	if p.turn != nil {
		close(p.turn)
		p.turn = nil
	}
}

// awaitTurn waits until no consumer with a higher priority than cs is
// active, and returns the context for cs's engine wait, which a higher
// consumer becoming active cancels, and its release (call it once the
// wait is over). ok false: cs stopped meanwhile.
func (p *prioLine) awaitTurn(cs *consumer) (ctx context.Context, release func(), ok bool) {
	for {
		p.mu.Lock()
		st := p.cons[cs]
		higher := false
		// A single-active-consumer queue's line decides alone: its
		// waiting consumers keep their credit, and must not hold back
		// the one at its head.
		if p.on.Load() && !cs.q.settings.singleActive {
			for c, s := range p.cons {
				if c.priority > cs.priority && s.active {
					higher = true
					break
				}
			}
		}
		if !higher || st == nil {
			rctx, cancel := context.WithCancel(cs.ctx)
			if st != nil {
				st.cancel = cancel
			}
			p.mu.Unlock()
			return rctx, func() {
				p.mu.Lock()
				if st != nil {
					st.cancel = nil
				}
				p.mu.Unlock()
				cancel()
			}, true
		}
		if p.turn == nil {
			p.turn = make(chan struct{})
		}
		turn := p.turn
		p.mu.Unlock()
		select {
		case <-turn:
		case <-cs.ctx.Done():
			return nil, nil, false
		}
	}
}
