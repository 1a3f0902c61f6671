package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/admin"
	"github.com/sluicemq/sluice/internal/advisor"
	"github.com/sluicemq/sluice/internal/alerts"
	"github.com/sluicemq/sluice/internal/dashboard"
)

// The operator's listings over a cluster's shards: the admin API's queue
// and task lists, the alerts, the advisor, the definitions export and the
// dashboard's overview (with its event stream) are served by shard 0's
// leader, which adds to its own those of the other shards, each read from
// the leader of its shard on a node-only path.

// Paths of a shard leader's own listings, served (Options.ShardViews) on
// its internal listener, which takes only nodes.
const (
	ShardQueuesPath      = "/sluice/internal/shard/queues"        // admin.Handler.ServeLocalQueues: api.QueueList
	ShardOverviewPath    = "/sluice/internal/shard/overview"      // dashboard.Dashboard.ServeLocalOverview: dashboard.Overview
	ShardTasksPath       = "/sluice/internal/shard/tasks"         // admin.Handler.ServeLocalTasks: api.TaskList
	ShardAlertsPath      = "/sluice/internal/shard/alerts"        // alerts.Manager.ServeHTTP: alerts.List
	ShardAdvisorPath     = "/sluice/internal/shard/advisor"       // dashboard.Dashboard.ServeLocalAdvisor: dashboard.Advice
	ShardDefinitionsPath = "/sluice/internal/shard/definitions"   // GET Server.serveLocalDefinitions: Definitions; POST Server.declareLocalQueues
	ShardDLSourcesPath   = "/sluice/internal/shard/dlsources"     // GET Server.serveLocalDLSources: StoredDeadLetterSources of this shard, as JSON
	ShardAMQPRoutesPath  = "/sluice/internal/shard/amqp-dlroutes" // GET Server.serveAMQPRoutes: the AMQP topology's DeadLetterRoutes, as JSON
)

// Placement is a cluster shard and the node leading it
// (dashboard.Placement).
type Placement = dashboard.Placement

// ShardAnswer is one other shard's answer to a ShardQueuesPath or
// ShardOverviewPath request (Options.OtherShards): its body, or why it
// could not be read.
type ShardAnswer struct {
	Shard int
	Body  []byte
	Err   error
}

// shardViews mounts the paths of this server's own listings on mux.
func (s *Server) shardViews(mux *http.ServeMux, adminH *admin.Handler, dash *dashboard.Dashboard, al *alerts.Manager) {
	mux.HandleFunc("GET "+ShardDefinitionsPath, s.serveLocalDefinitions)
	mux.HandleFunc("GET "+ShardDLSourcesPath, s.serveLocalDLSources)
	mux.HandleFunc("GET "+ShardAMQPRoutesPath, s.serveAMQPRoutes)
	mux.HandleFunc("POST "+ShardDefinitionsPath, s.declareLocalQueues)
	mux.HandleFunc("GET "+ShardQueuesPath, adminH.ServeLocalQueues)
	mux.HandleFunc("GET "+ShardOverviewPath, dash.ServeLocalOverview)
	mux.HandleFunc("GET "+ShardTasksPath, adminH.ServeLocalTasks)
	mux.Handle("GET "+ShardAlertsPath, al)
	mux.HandleFunc("GET "+ShardAdvisorPath, dash.ServeLocalAdvisor)
	mux.HandleFunc("POST "+ShardEnginePath, s.serveShardEngine)
	mux.HandleFunc("POST "+ShardLeaderPath, s.serveShardLeader)
}

// otherAdminQueues returns admin.Options.OtherQueues reading the other
// shards through other (Options.OtherShards): every shard's queues, or an
// error naming the shards that could not be read.
func otherAdminQueues(other func(ctx context.Context, path string) []ShardAnswer) func(ctx context.Context) ([]api.Queue, error) {
	return func(ctx context.Context) ([]api.Queue, error) {
		return readAll(ctx, other, ShardQueuesPath, func(l api.QueueList) []api.Queue { return l.Queues })
	}
}

// otherAdminTasks is otherAdminQueues for admin.Options.OtherTasks.
func otherAdminTasks(other func(ctx context.Context, path string) []ShardAnswer) func(ctx context.Context) ([]api.Task, error) {
	return func(ctx context.Context) ([]api.Task, error) {
		return readAll(ctx, other, ShardTasksPath, func(l api.TaskList) []api.Task { return l.Tasks })
	}
}

// readAll reads path from every other shard, decodes each answer as an L
// and returns the items of all of them, or an error naming the shards
// that could not be read.
func readAll[L, T any](ctx context.Context, other func(ctx context.Context, path string) []ShardAnswer, path string, items func(L) []T) ([]T, error) {
	out, errs := readShards(ctx, other, path, items)
	return out, errors.Join(errs...)
}

// otherOverviews returns dashboard.Options.OtherQueues reading the other
// shards through other: the meters of the queues of every shard read, and
// a line for each shard that could not be.
func otherOverviews(other func(ctx context.Context, path string) []ShardAnswer) func(ctx context.Context) ([]dashboard.QueueMeters, []string) {
	return func(ctx context.Context) ([]dashboard.QueueMeters, []string) {
		return readEach(ctx, other, ShardOverviewPath, func(o dashboard.Overview) []dashboard.QueueMeters { return o.Queues })
	}
}

// otherFindings is otherOverviews for dashboard.Options.OtherFindings.
func otherFindings(other func(ctx context.Context, path string) []ShardAnswer) func(ctx context.Context) ([]advisor.Finding, []string) {
	return func(ctx context.Context) ([]advisor.Finding, []string) {
		return readEach(ctx, other, ShardAdvisorPath, func(a dashboard.Advice) []advisor.Finding { return a.Findings })
	}
}

// otherAlerts returns the others of alerts.Manager.Handler reading the
// other shards through other: their alerts, and a line for each shard
// that could not be read.
func otherAlerts(other func(ctx context.Context, path string) []ShardAnswer) func(ctx context.Context) ([]alerts.State, []string) {
	return func(ctx context.Context) ([]alerts.State, []string) {
		return readEach(ctx, other, ShardAlertsPath, func(l alerts.List) []alerts.State { return l.Alerts })
	}
}

// readEach is readAll for the listings that show what they have: the
// items of every shard read, and a line ("shard 2: …") for each shard
// that could not be.
func readEach[L, T any](ctx context.Context, other func(ctx context.Context, path string) []ShardAnswer, path string, items func(L) []T) ([]T, []string) {
	out, errs := readShards(ctx, other, path, items)
	var missing []string
	for _, err := range errs {
		missing = append(missing, err.Error())
	}
	return out, missing
}

// readShards reads path from every other shard and decodes each answer
// as an L: the items of those read, and an error ("shard 2: …") for each
// shard that could not be.
func readShards[L, T any](ctx context.Context, other func(ctx context.Context, path string) []ShardAnswer, path string, items func(L) []T) ([]T, []error) {
	var out []T
	var errs []error
	for _, a := range other(ctx, path) {
		var l L
		if a.Err == nil {
			a.Err = json.Unmarshal(a.Body, &l)
		}
		if a.Err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", a.Shard, a.Err))
			continue
		}
		out = append(out, items(l)...)
	}
	return out, errs
}

// serveLocalDLSources answers, as JSON, this shard's dead-letter sources
// (StoredDeadLetterSources of its store: each queue a RedrivePolicy here
// names, with the queues naming it), for a node that holds no copy of
// this shard (Options.SourcesElsewhere, ADR 0016). 503 when the store
// cannot be read.
// serveAMQPRoutes answers ShardAMQPRoutesPath on a cluster's shard 0: the
// queues its AMQP topology routes dead letters to, each with its sources
// (amqp.Topology.DeadLetterRoutes); 503 while the topology is not whole
// (its bindings to queues of other shards being restored after a start).
func (s *Server) serveAMQPRoutes(w http.ResponseWriter, _ *http.Request) {
	routes, ok := s.amqp.DeadLetterRoutes()
	if !ok {
		http.Error(w, "the AMQP topology's bindings to queues of other shards are being restored", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(routes) // a caller gone cannot be told
}

func (s *Server) serveLocalDLSources(w http.ResponseWriter, _ *http.Request) {
	m, err := StoredDeadLetterSources(s.st)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(m) // a caller gone cannot be told
}
