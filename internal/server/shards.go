package server

import (
	"cmp"
	"log/slog"
	"net/http"
	"slices"

	"github.com/sluicemq/sluice/internal/admin"
	"github.com/sluicemq/sluice/internal/amqp"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/httpbody"
	"github.com/sluicemq/sluice/internal/sqs"
	"github.com/sluicemq/sluice/internal/store"
)

// What a cluster node with several shards (internal/cluster,
// docs/adr/0015-shards-and-a-router.md) needs from the layers below it,
// which it may not import itself: where an SQS request's queue is, and
// which queues a shard's store holds.

// SQSRoute is what an SQS request names (sqs.Route).
type SQSRoute = sqs.Route

// SQSRouteOf reports the queue an SQS request names (sqs.RouteOf); body
// is the request's whole body.
func SQSRouteOf(r *http.Request, body []byte) SQSRoute { return sqs.RouteOf(r, body) }

// BodyBudget bounds the request bodies a router buffers at once
// (httpbody.Budget).
type BodyBudget = httpbody.Budget

// NewBodyBudget returns a budget of limit bytes (0: the server's
// default), whose readers wait the default time for room before they are
// refused (httpbody.ErrBusy).
func NewBodyBudget(limit int64) *BodyBudget { return httpbody.NewBudget(limit, 0, clock.Real{}) }

// ErrBodyTooLarge is a BodyBudget's refusal of a body over its limit.
var ErrBodyTooLarge = httpbody.ErrTooLarge

// MaxSQSRequestBody is the largest SQS request body a router reads before
// it hands the request on (the SQS handler's own cap).
const MaxSQSRequestBody = 5 << 20

// MaxAdminRequestBody is the admin API's cap on a request body
// (admin.MaxRequestBody), for a router that reads one to place it.
const MaxAdminRequestBody = admin.MaxRequestBody

// WriteAdminError answers with the admin API's error body.
func WriteAdminError(w http.ResponseWriter, status int, code, msg string) {
	writeAdminError(w, status, code, msg)
}

// ValidQueueName reports whether name is a valid queue name
// (engine.ValidQueueName).
func ValidQueueName(name string) bool { return engine.ValidQueueName(name) }

// StoredQueue reports whether st, a shard's state store, holds queue name
// (engine.StoredQueue).
func StoredQueue(st store.Store, name string) (bool, error) { return engine.StoredQueue(st, name) }

// StoredTask reports whether st, a shard's state store, holds move task
// id (engine.StoredTask).
func StoredTask(st store.Store, id string) (bool, error) { return engine.StoredTask(st, id) }

// StoredQueueNames lists the queues st holds whose name starts with prefix
// (engine.StoredQueueNames).
func StoredQueueNames(st store.Store, prefix string) ([]string, error) {
	return engine.StoredQueueNames(st, prefix)
}

// QueuePlacement is one queue name's placement in shard 0 (ADR 0016;
// engine.Placement).
type QueuePlacement = engine.Placement

// MaxPlacementNames bounds the names of one PlacementsCall
// (engine.MaxPlacementNames).
const MaxPlacementNames = engine.MaxPlacementNames

// StoredPlacements returns the queue placements st (a copy of shard 0's
// store) holds, in name order; shard ≥ 0 keeps only those naming it
// (engine.StoredPlacements).
func StoredPlacements(st store.Store, shard int) ([]QueuePlacement, error) {
	return engine.StoredPlacements(st, shard)
}

// StoredPlacement returns queue name's placement in st (a copy of shard
// 0's store), if it has one (engine.StoredPlacement).
func StoredPlacement(st store.Store, name string) (QueuePlacement, bool, error) {
	return engine.StoredPlacement(st, name)
}

// StoredDeadLetterSources maps every queue named by the RedrivePolicy of a
// queue st holds to those queues (engine.StoredDeadLetterSources).
func StoredDeadLetterSources(st store.Store) (map[string][]string, error) {
	return engine.StoredDeadLetterSources(st)
}

// elsewhereEngine is the SQS handler's engine on a server whose cluster
// has other shards: it reads a queue of another shard from that shard's
// leader (sqs.QueuesElsewhere), so that a RedrivePolicy may name it.
type elsewhereEngine struct {
	sqs.Engine
	remote *remoteEngine
}

// GetQueueElsewhere is GetQueue asked of the leader of the shard that holds
// queue name (the AMQP router's lookup, which also notes it as a queue
// elsewhere).
func (e elsewhereEngine) GetQueueElsewhere(name string) (engine.QueueInfo, error) {
	return e.remote.getRemote(name)
}

// listingEngine is the SQS handler's engine on a server whose cluster has
// other shards: ListQueues adds their queues to the engine's own.
type listingEngine struct {
	sqs.Engine
	other func(prefix string) ([]string, error)
	log   *slog.Logger
}

// ListQueues merges the engine's queues with the other shards'. A shard
// that cannot be read is left out (logged): ListQueues is a listing, and
// SQS's is eventually consistent too.
func (l listingEngine) ListQueues(prefix string) []string {
	names := l.Engine.ListQueues(prefix)
	more, err := l.other(prefix)
	if err != nil {
		l.log.Warn("ListQueues: another shard's queues could not be read", "err", err)
	}
	if len(more) == 0 {
		return names
	}
	names = append(names, more...)
	slices.Sort(names)
	return slices.Compact(names)
}

// shared returns o with its node-wide memory bounds and queue cap divided
// among n servers (Options.NodeShare): each positive or default value
// becomes 1/n of it (rounded up for the queue cap; the HTTP body budget
// never below one largest request), and negative values (off) stay off.
func (o Options) shared(n int) Options {
	div := func(v, def int64) int64 {
		if v < 0 {
			return v
		}
		if v == 0 {
			v = def
		}
		return max(v/int64(n), 1)
	}
	o.BodyMemoryBudget = div(o.BodyMemoryBudget, engine.DefaultBodyMemoryBudget)
	o.ReadyMemoryBudget = div(o.ReadyMemoryBudget, engine.DefaultReadyMemoryBudget)
	if w := memoryWatermark(o.MemoryHighWatermark); w > 0 {
		o.MemoryHighWatermark = max(w/int64(n), 1)
	}
	o.HTTPBodyBudget = max(div(o.HTTPBodyBudget, httpbody.DefaultLimit), MaxSQSRequestBody)
	if o.MaxQueues >= 0 {
		q := cmp.Or(o.MaxQueues, engine.DefaultMaxQueues)
		o.MaxQueues = (q + n - 1) / n
	}
	return o
}

// withoutQueuesElsewhere drops from d the queues that live on another
// shard of the cluster (Options.NameTaken: SQS queues, and AMQP queues of
// vhost "/", which share their names), and the bindings to them, with a
// warning: they exist, and this server's engine could only refuse them
// (engine.ErrQueueElsewhere), failing a start or an import over a queue
// that is there.
func (s *Server) withoutQueuesElsewhere(d Definitions) Definitions {
	taken := s.opts.NameTaken
	if taken == nil {
		return d
	}
	skip := func(name string) bool {
		if taken(name) {
			s.log.Warn("a declared queue lives on another shard; its declaration here is skipped, its settings there left as they are", "queue", name)
			return true
		}
		return false
	}
	d.Queues = slices.DeleteFunc(slices.Clone(d.Queues), func(q QueueDeclaration) bool { return skip(q.Name) })
	var gone []string
	d.AMQPQueues = slices.DeleteFunc(slices.Clone(d.AMQPQueues), func(q amqp.QueueDefinition) bool {
		if (q.Vhost == "" || q.Vhost == "/") && skip(q.Name) {
			gone = append(gone, q.Name)
			return true
		}
		return false
	})
	d.Bindings = slices.DeleteFunc(slices.Clone(d.Bindings), func(b amqp.BindingDefinition) bool {
		return (b.Vhost == "" || b.Vhost == "/") && (b.DestinationType == "" || b.DestinationType == "queue") && slices.Contains(gone, b.Destination)
	})
	return d
}
