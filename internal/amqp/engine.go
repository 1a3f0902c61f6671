package amqp

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// Engine is what the AMQP front-end needs of the queue engine. The server
// passes its *engine.Engine; ADR 0015's router, which sends each call to
// the shard that holds the named queue, is to implement it too. Every
// method has the contract of the *engine.Engine method of the same name.
type Engine interface {
	// Queues and their topology records.
	CreateQueue(name string, cfg engine.QueueConfig, tags map[string]string) (info engine.QueueInfo, created bool, err error)
	CreateQueueWithMeta(name string, cfg engine.QueueConfig, tags map[string]string, meta []engine.MetaRecord) (info engine.QueueInfo, created bool, err error)
	DeleteQueue(name string) error
	DropQueue(name string) error
	PurgeReady(name string) (n int, err error)
	GetQueue(name string) (engine.QueueInfo, error)
	Config(name string) (*engine.QueueConfig, error)
	UpdateQueue(name string, fn func(cfg *engine.QueueConfig) error) error
	DeadLetterSources(dlq string) ([]string, error)
	Browse(name string, f engine.Filter, cursor uint64, limit int) (engine.Page, error)
	MaxQueues() int
	PutMeta(namespace, key string, value []byte) error
	DeleteMeta(namespace, key string) error
	ScanMeta(namespace string, fn func(key string, value []byte) error) error

	// Messages: publishes, deliveries and their settlement.
	Send(name string, msgs []engine.Message) ([]engine.SendResult, error)
	SendMany(sends []engine.QueueSend) ([]engine.QueueSendResult, error)
	Receive(ctx context.Context, name string, req engine.ReceiveRequest) ([]engine.Delivery, error)
	Delete(name string, handles []string) ([]error, error)
	Requeue(queue string, handles []string, front bool) ([]error, error)
	Nack(queue string, handles []string) ([]error, error)
	Abandon(queue string, handles []string) ([]error, error)
	Reject(name string, handles []string, f engine.Failure) ([]error, error)
	LeaseEnd(queue, handle string) (time.Time, error)

	// Health and flow-control hints.
	Failed() error
	VisibleHint(name string) (int, bool)
}

var _ Engine = (*engine.Engine)(nil)

// Elsewhere names the queues of vhost "/" that live outside this server's
// own store: in a cluster with shards, the SQS queues other shards hold
// (ADR 0015), which the Engine given to the server reaches on their
// shards' leaders. The server uses them as it uses an SQS queue of its own
// (adopted: publishes, consumers, gets, purges, deletes, bindings),
// except that it declares them only without arguments
// (docs/amqp-compat.md).
type Elsewhere interface {
	// Holds reports whether queue name lives elsewhere. It may take a
	// moment (a cluster node catches its copies up first).
	Holds(name string) bool
}

// Placer is an Engine that puts some new queues of vhost "/" elsewhere:
// in a cluster with shards, on the shard the cluster's placement chooses
// for a queue of that name (ADR 0015, ADR 0016). The server offers it
// every new durable, non-exclusive, non-auto-delete queue declared
// without arguments; one it places elsewhere is then used as an Elsewhere
// queue.
type Placer interface {
	// CreateElsewhere creates queue name with cfg where the placement
	// puts it, when that is not this server's own engine, and reports
	// whether it did (false, nil: create it here). An error means the
	// queue was created nowhere, or that it cannot be told whether it
	// was: a declare that fails.
	CreateElsewhere(name string, cfg engine.QueueConfig) (bool, error)
}
