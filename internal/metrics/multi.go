package metrics

import (
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// Multi returns an Observer that passes every event to each of obs, in
// order (engine.Options takes one Observer; metrics and alerts both need
// the events). Nil observers and engine.NopObserver are dropped and nested
// Multis are flattened; with nothing left it returns engine.NopObserver,
// with one observer that observer itself.
//
// Each observer is called synchronously, like the engine calls Multi, so
// each must honour the Observer contract: fast, non-blocking, never calling
// the engine.
func Multi(obs ...engine.Observer) engine.Observer {
	var flat multi
	for _, o := range obs {
		switch o := o.(type) {
		case nil, engine.NopObserver, *engine.NopObserver:
		case multi:
			flat = append(flat, o...)
		default:
			flat = append(flat, o)
		}
	}
	switch len(flat) {
	case 0:
		return engine.NopObserver{}
	case 1:
		return flat[0]
	}
	return flat
}

type multi []engine.Observer

func (m multi) Sent(queue string, n int) {
	for _, o := range m {
		o.Sent(queue, n)
	}
}

func (m multi) Received(queue string, n, redelivered int) {
	for _, o := range m {
		o.Received(queue, n, redelivered)
	}
}

func (m multi) Deleted(queue string, processing time.Duration) {
	for _, o := range m {
		o.Deleted(queue, processing)
	}
}

func (m multi) DeadLettered(queue, target, reason string, timeToDeadLetter time.Duration) {
	for _, o := range m {
		o.DeadLettered(queue, target, reason, timeToDeadLetter)
	}
}

// DeadLetteredClass implements engine.ErrorClassObserver for the
// observers that do.
func (m multi) DeadLetteredClass(queue, reason, errorClass string) {
	for _, o := range m {
		if co, ok := o.(engine.ErrorClassObserver); ok {
			co.DeadLetteredClass(queue, reason, errorClass)
		}
	}
}

func (m multi) Expired(queue string, n int) {
	for _, o := range m {
		o.Expired(queue, n)
	}
}
