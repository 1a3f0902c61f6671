package sqs

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// QueuesElsewhere may be implemented by an Engine whose queues may live
// elsewhere (a cluster's other shards, where QueueElsewhere is true): the
// settings of such a queue, asked of where it lives, so that a
// RedrivePolicy naming it is checked as one naming a queue of this
// engine (its dead letters move there: ADR 0015 step 5).
type QueuesElsewhere interface {
	GetQueueElsewhere(name string) (engine.QueueInfo, error)
}

// Engine is what the SQS front-end needs of the queue engine. The server
// passes its *engine.Engine; ADR 0015's router, which sends each call to
// the shard that holds the named queue, is to implement it too, so that
// the handler stays unaware of where a queue lives. Every method has the
// contract of the *engine.Engine method of the same name.
type Engine interface {
	// Queues.
	CreateQueue(name string, cfg engine.QueueConfig, tags map[string]string) (info engine.QueueInfo, created bool, err error)
	DeleteQueue(name string) error
	PurgeQueue(name string) error
	GetQueue(name string) (engine.QueueInfo, error)
	Config(name string) (*engine.QueueConfig, error)
	UpdateQueue(name string, fn func(cfg *engine.QueueConfig) error) error
	ListQueues(prefix string) []string
	// QueueElsewhere reports whether a queue this engine does not hold
	// lives outside it (engine.Options.NameTaken: another shard).
	QueueElsewhere(name string) bool
	TagQueue(name string, tags map[string]string) error
	UntagQueue(name string, keys []string) error
	DeadLetterSources(dlq string) ([]string, error)
	Browse(name string, f engine.Filter, cursor uint64, limit int) (engine.Page, error)

	// Messages.
	Send(name string, msgs []engine.Message) ([]engine.SendResult, error)
	Receive(ctx context.Context, name string, req engine.ReceiveRequest) ([]engine.Delivery, error)
	Delete(name string, handles []string) ([]error, error)
	ChangeVisibility(name string, changes []engine.VisibilityChange) ([]error, error)

	// Move tasks (StartMessageMoveTask and friends).
	StartMoveTask(spec engine.MoveTaskSpec) (engine.MoveTask, error)
	GetMoveTask(id string) (engine.MoveTask, error)
	CancelMoveTask(id string) (engine.MoveTask, error)
	MoveTasks(source string) ([]engine.MoveTask, error)

	// Lock-free hints for send back-pressure (flow.go).
	VisibleHint(name string) (int, bool)
	ReceivedAtHint(name string) (time.Time, bool)
}

var _ Engine = (*engine.Engine)(nil)
