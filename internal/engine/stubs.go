package engine

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/store"
)

// Options configure an Engine.
type Options struct {
	Store  store.Store  // required
	Clock  clock.Clock  // nil: clock.Real
	Logger *slog.Logger // nil: discard
}

// Engine is the protocol-neutral queue engine.
type Engine struct{ opts Options }

var errTODO = errors.New("engine: not implemented yet")

// Open recovers the engine's state from the store.
func Open(opts Options) (*Engine, error) { return &Engine{opts: opts}, nil }

// Close stops the engine's timers; it does not close the store.
func (e *Engine) Close() error { return nil }

func (e *Engine) createQueue(string, QueueConfig, map[string]string) (QueueInfo, bool, error) {
	return QueueInfo{}, false, errTODO
}
func (e *Engine) getQueue(string) (QueueInfo, error)                 { return QueueInfo{}, errTODO }
func (e *Engine) updateQueue(string, func(*QueueConfig) error) error { return errTODO }
func (e *Engine) deleteQueue(string) error                           { return errTODO }
func (e *Engine) listQueues(string) []string                         { return nil }
func (e *Engine) tagQueue(string, map[string]string, []string) error { return errTODO }
func (e *Engine) purgeQueue(string) error                            { return errTODO }
func (e *Engine) deadLetterSources(string) ([]string, error)         { return nil, errTODO }
func (e *Engine) send(string, []Message) ([]SendResult, error)       { return nil, errTODO }
func (e *Engine) receive(context.Context, string, ReceiveRequest) ([]Delivery, error) {
	return nil, errTODO
}
func (e *Engine) deleteMessages(string, []string) ([]error, error) { return nil, errTODO }
func (e *Engine) changeVisibility(string, []VisibilityChange) ([]error, error) {
	return nil, errTODO
}
