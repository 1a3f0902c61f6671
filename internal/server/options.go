package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/alerts"
	"github.com/sluicemq/sluice/internal/amqp"
	"github.com/sluicemq/sluice/internal/auth/httpauth"
	"github.com/sluicemq/sluice/internal/auth/sigv4"
	"github.com/sluicemq/sluice/internal/buildinfo"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/sqs"
	"github.com/sluicemq/sluice/internal/store"
)

// Options configure a Sluice server. Start from DefaultOptions, then apply a
// config file (LoadFile) and flags; Validate runs before anything starts,
// and a bad value stops the start with a message naming the setting.
type Options struct {
	// DataDir holds the durable store. Created if missing.
	DataDir string `toml:"data_dir"`
	// Store is "disk" (the default: pebble in DataDir, every acknowledged
	// write fsynced) or "memory" (nothing survives a restart; for tests
	// and demos only).
	Store string `toml:"store"`
	// StoreFS, when set, is the filesystem the "disk" store lives on
	// instead of the operating system's; DataDir is then a path inside it
	// and the free-disk watch is off. Tests pass a crashable in-memory
	// filesystem (internal/brokertest/crashfs) to cut power under the
	// real front-ends (test/faults). In cluster mode it is the filesystem of every
	// shard's Raft log, state store and snapshots (raftstore.Config.FS),
	// where tests fault it; the node still watches the free space of
	// DataDir on the operating system's filesystem (min_free_disk). Not
	// settable from a config file.
	StoreFS vfs.FS `toml:"-"`
	// InjectedStore, when set, is the store the server runs on instead of
	// opening one: Store and StoreFS then choose nothing, and DataDir
	// should name the directory the store's files live in (the free-disk
	// watch, min_free_disk, checks it). The server closes it when it stops, as it closes a store it opened;
	// the owner must keep whatever lies beneath (cluster mode passes its
	// replicated store, whose Close ends the view, not the Raft node).
	// Not settable from a config file.
	InjectedStore store.Store `toml:"-"`
	// ResponseHeaders, when set, are set on every HTTP response the
	// server's handler writes (a cluster leader's server stamps
	// X-Sluice-Term and X-Sluice-Node). Not settable from a config file.
	ResponseHeaders http.Header `toml:"-"`
	// InternalHandler, when set, serves the paths under /sluice/internal/
	// without [http_auth]: node-to-node routes of a cluster leader's
	// server, whose listener takes only nodes (WrapListener; a cluster
	// node's public listeners never pass those paths on). Not settable from a
	// config file.
	InternalHandler http.Handler `toml:"-"`
	// WrapListener, when set, wraps the HTTP listener ("http") and the
	// plain AMQP listener ("amqp") as soon as they are bound, beneath the
	// connection caps: a cluster leader's server accepts there only
	// connections that passed the node handshake. Not settable from a
	// config file.
	WrapListener func(kind string, ln net.Listener) net.Listener `toml:"-"`
	// OtherQueueNames, when set, lists the queues starting with prefix
	// that live outside this server's engine (a cluster's other shards,
	// read from this node's copy of them): SQS ListQueues answers with
	// both. Not settable from a config file.
	OtherQueueNames func(prefix string) ([]string, error) `toml:"-"`
	// ShardViews, when set, serves this server's own listings (queues,
	// tasks, alerts, advice, definitions, the dashboard's overview) on
	// the Shard*Path paths, for the leader of a cluster's shard 0
	// (OtherShards). Set it only on a listener that takes nodes alone
	// (WrapListener): the paths are not behind [http_auth]. Not settable
	// from a config file.
	ShardViews bool `toml:"-"`
	// OtherShards, when set, reads path (one of the Shard*Path) from the
	// leader of every other shard of the cluster: the admin API's GET
	// /sluice/v1/queues and /tasks, GET /sluice/v1/alerts, the advisor,
	// the definitions export and the dashboard's overview then cover
	// those shards' queues with this server's. Not settable from a
	// config file.
	OtherShards func(ctx context.Context, path string) []ShardAnswer `toml:"-"`
	// DeclareElsewhere, when set, takes an imported definitions
	// document's SQS queues (POST /sluice/v1/definitions), declares on
	// the leaders of the other shards of the cluster those placed there
	// (as the config's [[queues]] are placed), and returns those to
	// declare here. An error wrapping ErrDefinitionsRefused is a shard's
	// refusal of a declaration; any other, a shard that could not be
	// reached. Not settable from a config file.
	DeclareElsewhere func(ctx context.Context, qs []QueueDeclaration) ([]QueueDeclaration, error) `toml:"-"`
	// Placement, when set, names the cluster shard this server's queues
	// live on and the node leading it, shown with each queue on the
	// dashboard. Not settable from a config file.
	Placement *Placement `toml:"-"`
	// NameTaken, when set, reports whether a queue of this name lives on
	// another shard of the cluster (engine.Options.NameTaken): creating
	// it here is refused, and the config's and an import's declarations
	// of it are skipped. Not settable from a config file.
	NameTaken func(name string) bool `toml:"-"`
	// ShardCall, when set with NameTaken, posts body to path (one of the
	// Shard*Path) on the leader of the other shard that holds queue name
	// and returns its answer's body; ErrNotElsewhere when no other shard
	// holds it. Through it the AMQP server uses those queues (remote.go).
	// Not settable from a config file.
	ShardCall func(ctx context.Context, name, path string, body []byte) ([]byte, error) `toml:"-"`
	// ShardCreate, when set with ShardCall, places a new queue of vhost
	// "/" that the AMQP server is asked to declare: it posts body (an
	// engine call creating queue name) to ShardEnginePath on the leader of
	// the shard where the cluster's placement puts a new queue of that
	// name, and returns the leader's error (ErrUnknownEngineCall from a
	// leader of an older build); ErrNotElsewhere when that is this
	// server's own shard (the queue is then created here, as before). Not
	// settable from a config file.
	ShardCreate func(ctx context.Context, name string, body []byte) error `toml:"-"`
	// QueueHeldElsewhere, when set with ShardCall, reports from this
	// node's copies alone whether a queue lives on another shard
	// (engine.Options.QueueHeldElsewhere): a RedrivePolicy may then name
	// it, and this server's mover (transfer.go) carries the dead letters
	// there.
	QueueHeldElsewhere func(name string) bool `toml:"-"`
	// RouteCall, when set, posts body (an engine call) to ShardEnginePath
	// on the leader of the shard that routes this server's AMQP dead
	// letters (a cluster's shard 0, which holds the AMQP topology) and
	// returns its answer's body: the engine writes the dead letters of
	// queues with a dead-letter exchange as route transfers
	// (engine.Options.RouteElsewhere), and the mover (transfer.go) sends
	// them there. Not settable from a config file.
	RouteCall func(ctx context.Context, body []byte) ([]byte, error) `toml:"-"`
	// RouteLater, with ShardCall and no RouteCall (a cluster's shard 0),
	// has the engine keep the dead letters of queues with a dead-letter
	// exchange as route transfers while the AMQP topology is not ready
	// (engine.Options.RouteLater: its bindings to queues of other shards
	// not all restored after a start), and the mover route them here once
	// it is. Not settable from a config file.
	RouteLater bool `toml:"-"`
	// SourcesElsewhere, when set, maps every queue named by the
	// RedrivePolicy of a queue of the cluster's other shards to those
	// queues (engine.Options.SourcesElsewhere).
	SourcesElsewhere func(fresh bool) (map[string][]string, error) `toml:"-"`
	// HoldDeleted, when set, is asked to hold the name of every queue
	// this server's engine deletes, before the delete
	// (engine.Options.HoldDeleted): an error fails the delete, 503
	// ServiceUnavailable over SQS, with nothing removed. Not settable from
	// a config file.
	HoldDeleted func(name string) error `toml:"-"`
	// Deleted, when set, is told of every queue this server's engine
	// deletes, once the delete is committed and before it is answered
	// (engine.Options.Deleted). Not settable from a config file.
	Deleted func(name string, at time.Time) `toml:"-"`
	// NodeShare, when above 1, says this server is one of NodeShare on
	// its node (a cluster node's shards, each led here possibly at once)
	// sharing the node's memory: BodyMemoryBudget, ReadyMemoryBudget, MemoryHighWatermark,
	// HTTPBodyBudget and MaxQueues each get that fraction of their value
	// (of the default when unset), so the node's total stays within what
	// is configured. Not settable from a config file.
	NodeShare int `toml:"-"`
	// MoverPassTransfers bounds how many transfers (dead letters and
	// redriven messages bound for another shard) one pass of the mover
	// reads; 0: 16 rounds of 256 (transfer.go). Tests set a smaller one.
	// Not settable from a config file.
	MoverPassTransfers int `toml:"-"`
	// MoverParked, when set, is called by the mover (transfer.go) with
	// parked true and the time its timer fires (zero: no timer) just
	// before it waits, and with parked false when it wakes: tests that
	// drive it with a fake clock advance the clock only while it waits.
	// Not settable from a config file.
	MoverParked func(parked bool, deadline time.Time) `toml:"-"`
	// SQSListen is the address of the SQS HTTP API, the health endpoint
	// and (later) the admin API and dashboard. Port 0 picks a free port.
	SQSListen string `toml:"sqs_listen"`
	// AccountID and Region appear in queue URLs and ARNs. Clients only
	// need them to be consistent.
	AccountID string `toml:"account_id"`
	Region    string `toml:"region"`
	// ReadyFile, if set, is written (atomically) once the listeners are
	// up, with JSON {"sqs":"host:port","amqp":"host:port","pid":N}, and
	// "amqps" and "debug" when those listeners are on (WriteReadyFile).
	// Tests and scripts that start Sluice on port 0 read the addresses
	// from it.
	ReadyFile string `toml:"ready_file"`
	// DebugListen, if set, is the address of a listener serving the Go
	// runtime's profiles under /debug/pprof/ (DebugServer): heap,
	// goroutines, CPU, traces. It has no authentication, so it must be a
	// loopback address; allow_non_loopback does not lift that. Port 0
	// picks a free port, named "debug" in the ready file. "" (the
	// default) is off.
	DebugListen string `toml:"debug_listen"`
	// DebugAddr is the address the debug listener bound, which the
	// process that opened it (cmd/sluice) sets for the ready file. Not
	// settable from a config file.
	DebugAddr string `toml:"-"`
	// LogLevel is debug, info, warn or error. LogFormat is text or json.
	LogLevel  string `toml:"log_level"`
	LogFormat string `toml:"log_format"`
	// BodyMemoryBudget caps the bytes of message bodies kept in memory;
	// bodies beyond it stay on disk and are read when needed. 0: the
	// engine's default (64 MiB, engine.DefaultBodyMemoryBudget); negative:
	// no cap.
	BodyMemoryBudget int64 `toml:"body_memory_budget"`
	// ReadyMemoryBudget bounds the index memory of the queues' ready
	// windows together (engine.Options.ReadyMemoryBudget): past it, each
	// queue keeps a few dozen ready messages in memory instead of up to
	// 2,048, so a backlog spread over many queues costs memory for a
	// few messages of each. 0: the engine's default (32 MiB); negative:
	// no bound.
	ReadyMemoryBudget int64 `toml:"ready_memory_budget"`
	// LogDrops logs every message dropped for want of a dead-letter
	// target (an AMQP reject without a DLX, a full dead-letter target) at
	// Info with its id; otherwise at Debug. Drops are always counted
	// (sluice_dropped_total).
	LogDrops bool `toml:"log_drops"`

	// MaxQueues caps the number of queues (SQS and AMQP together; 0:
	// 10,000; negative: no cap): creating one more fails with SQS
	// OverLimit or AMQP 406. MaxQueueMessages (0: 10,000,000) and
	// MaxQueueBytes (0: no cap) cap every queue's messages and body
	// bytes, in flight included (negative: no cap); a send over them
	// fails with SQS OverLimit, or an AMQP nack under confirms.
	MaxQueues        int   `toml:"max_queues"`
	MaxQueueMessages int   `toml:"max_queue_messages"`
	MaxQueueBytes    int64 `toml:"max_queue_bytes"`

	// MetricsMaxQueueSeries is how many queues get /metrics series of
	// their own (0: 1,000; negative: all); the rest are counted together
	// under queue="(other)".
	MetricsMaxQueueSeries int `toml:"metrics_max_queue_series"`

	// MinFreeDisk is the free space (bytes) below which the broker refuses
	// new messages until space returns (back-pressure instead of running
	// the store into ENOSPC). 0 turns the watch off. It is checked when
	// the broker starts, before it accepts anything, and every second
	// after. What each write path does at the watermark is in
	// docs/reliability.md ("Disk full"). It should be at least
	// RestartReserve: the space a restart needs to replay the store's
	// unflushed log; a smaller value is accepted with a warning.
	MinFreeDisk int64 `toml:"min_free_disk"`

	// ExternalDiskWatch: the caller watches DataDir's free space and
	// raises the disk alarm itself (Server.SetDiskAlarm); the server then
	// neither polls it nor exports sluice_disk_* (a cluster node does both
	// for every node, and its leader also counts its followers' disks).
	// Not settable from a config file.
	ExternalDiskWatch bool `toml:"-"`

	// freeBytes, when set, replaces the real free-space probe (tests).
	freeBytes func(dir string) (uint64, error)

	// MemoryHighWatermark is the memory (bytes) the engine may account
	// for — every queued message's index entry with its attributes and
	// AMQP envelope, bodies held in memory, FIFO dedup entries — before
	// the broker refuses new messages (SQS: 503 ServiceUnavailable; AMQP:
	// publishers blocked with connection.blocked "low on memory") until
	// it falls below 90% of it. 0: 40% of the memory limit (the cgroup's,
	// else physical memory); negative: off. See docs/reliability.md.
	MemoryHighWatermark int64 `toml:"memory_high_watermark"`

	// HTTPBodyBudget bounds the bytes of request bodies buffered in memory
	// across all HTTP requests in flight (before and after SigV4). A
	// request that finds it spent waits up to 2 s, then gets 503
	// ServiceUnavailable, which SDKs retry. 0: 256 MiB.
	HTTPBodyBudget int64 `toml:"http_body_budget"`

	// MaxHTTPConnections caps open connections on the HTTP listener. At
	// the cap the connection idle longest is closed to make room (new
	// connections wait in the kernel's backlog only while every one is
	// busy with a request), and from three quarters of it on, connections
	// idle for 2 s are closed. 0: no cap.
	MaxHTTPConnections int `toml:"max_http_connections"`
	// MaxHTTPConnectionsPerIP caps the HTTP connections from one IP
	// address; one more closes that address's longest-idle connection, or
	// is itself closed. 0: no cap.
	MaxHTTPConnectionsPerIP int `toml:"max_http_connections_per_ip"`

	// AMQPListen is the AMQP 0-9-1 listener; "" turns it off.
	AMQPListen string `toml:"amqp_listen"`
	// AMQPSListen is an AMQP-over-TLS listener (needs [tls]); "" is off.
	AMQPSListen string `toml:"amqps_listen"`
	// AMQPMaxPartialBytes caps the bytes of message bodies one AMQP
	// connection may have partly received (0: 16 MiB; negative: no cap);
	// over it the connection is closed with 506 RESOURCE_ERROR.
	// AMQPMaxTxBytes caps the bytes one connection may hold in uncommitted
	// transactions (0: 32 MiB; negative: no cap); the publish over it
	// closes its channel with 406 PRECONDITION_FAILED.
	AMQPMaxPartialBytes int `toml:"amqp_max_partial_bytes"`
	AMQPMaxTxBytes      int `toml:"amqp_max_tx_bytes"`
	// AMQPMaxConnectionsPerIP caps AMQP connections from one IP address
	// (0: 1024; negative: no cap); one more is closed at accept.
	// AMQPMaxHandshakes caps connections that have not finished logging in
	// (0: 64; negative: no cap); one more closes the one waiting longest.
	// A handshake must finish within 5 s.
	AMQPMaxConnectionsPerIP int `toml:"amqp_max_connections_per_ip"`
	AMQPMaxHandshakes       int `toml:"amqp_max_handshakes"`
	// AMQPFlowMinBacklog, AMQPFlowCreditFactor and AMQPFlowMaxWait tune
	// AMQP publisher flow control (docs/amqp-compat.md, "Flow control"):
	// a queue with consumers whose ready backlog passes max(min backlog,
	// factor × the sum of its consumers' prefetch), and the lowest backlog
	// seen since its consumers came plus half that mark, stops the
	// reading of the connections publishing to it, each pause at most the
	// max wait, until the backlog is back to half that mark (or that
	// lowest backlog plus a quarter of it). 0: 1000, 4 and 1s; a negative
	// max wait turns flow control off.
	AMQPFlowMinBacklog   int      `toml:"amqp_flow_min_backlog"`
	AMQPFlowCreditFactor int      `toml:"amqp_flow_credit_factor"`
	AMQPFlowMaxWait      duration `toml:"amqp_flow_max_wait"`
	// SQSSendFlowBacklog is the mark of SQS send back-pressure (default
	// 2000; 0: off): a SendMessage(Batch) to a queue received from within
	// the last second with more visible messages than this, and than the
	// lowest backlog seen since its receivers came plus half the mark,
	// waits, before it is stored, until the receivers have made the
	// backlog smaller than it was when the wait began (or back to half
	// the mark, or that lowest backlog plus a quarter of it), at most
	// SQSSendFlowMaxWait (0: 200ms; at most 1s). It is never refused for
	// this (internal/sqs/flow.go).
	SQSSendFlowBacklog int      `toml:"sqs_send_flow_backlog"`
	SQSSendFlowMaxWait duration `toml:"sqs_send_flow_max_wait"`
	// AMQPUsers may log in over AMQP. Empty: guest/guest, from loopback
	// only, as RabbitMQ.
	AMQPUsers []AMQPUser `toml:"amqp_users"`
	// AMQPMaxMessageSize is the largest AMQP message body (bytes) a
	// publish may carry; larger ones close the channel with 406. Default
	// 16 MiB (RabbitMQ 4.x's max_message_size); 1 B – 512 MiB. SQS sends
	// keep AWS's 1 MiB.
	AMQPMaxMessageSize int `toml:"amqp_max_message_size"`
	// AMQPProduct is the "product" server property AMQP clients see
	// (default "Sluice"). Some tools and client test suites check it
	// (e.g. for "RabbitMQ").
	AMQPProduct string `toml:"amqp_product"`

	// SQSCredentials, when set, make every SQS request prove itself with
	// AWS Signature Version 4 using one of these keys.
	SQSCredentials []SQSCredential `toml:"sqs_credentials"`
	// HTTPAuth guards the admin API, dashboard, advisor, alerts and
	// /metrics with bearer tokens or basic auth. /health stays open.
	HTTPAuth HTTPAuthConfig `toml:"http_auth"`
	// TLS, when set, makes the HTTP listener serve HTTPS and enables
	// AMQPSListen.
	TLS TLSConfig `toml:"tls"`

	// AllowedHosts are the names (besides IP literals, localhost and
	// *.localhost) clients may address the HTTP listener by, in the Host
	// header: "sluice.internal", "*.example.com"; "*" allows any. Other
	// names get 421, which stops DNS-rebinding pages (browser.go).
	AllowedHosts []string `toml:"allowed_hosts"`

	// AllowNonLoopback permits listening beyond loopback without
	// credentials. Without it, a non-loopback listener is refused unless
	// its protocol's credentials are configured (SQS keys and HTTP auth
	// for the HTTP listener; AMQP users for AMQP).
	AllowNonLoopback bool `toml:"allow_non_loopback"`

	// Alerts configures the built-in alert rules and their webhooks.
	Alerts AlertsConfig `toml:"alerts"`

	// Queues, Exchanges, AMQPQueues and Bindings are declared at every
	// start, before the listeners open ([[queues]], [[exchanges]],
	// [[amqp_queues]], [[bindings]]; see Definitions). What exists with
	// the same settings is left alone; a declared SQS queue whose
	// attributes changed in the file gets the new values; an AMQP object
	// declared with different settings stops the start.
	Queues     []QueueDeclaration        `toml:"queues"`
	Exchanges  []amqp.ExchangeDefinition `toml:"exchanges"`
	AMQPQueues []amqp.QueueDefinition    `toml:"amqp_queues"`
	Bindings   []amqp.BindingDefinition  `toml:"bindings"`

	// Cluster is the [cluster] section (cluster_options.go): when present,
	// cmd/sluice runs this node as a member of a Raft group
	// (internal/cluster) instead of calling New directly.
	Cluster ClusterConfig `toml:"cluster"`

	// Build names the running build, for the startup log line and the
	// sluice_build_info metric. cmd/sluice fills it from buildinfo.Read;
	// it is not a config file setting.
	Build buildinfo.Info `toml:"-"`
}

// AMQPUser is one [[amqp_users]] entry. PasswordHash comes from
// `sluice hash-password --amqp`; Password (plaintext) is for development.
type AMQPUser struct {
	Name         string                    `toml:"name"`
	PasswordHash string                    `toml:"password_hash"`
	Password     string                    `toml:"password"`
	Tags         []string                  `toml:"tags"`
	Permissions  map[string]AMQPPermission `toml:"permissions"` // vhost → permissions
}

// AMQPPermission holds RabbitMQ's configure/write/read regular expressions.
type AMQPPermission struct {
	Configure string `toml:"configure"`
	Write     string `toml:"write"`
	Read      string `toml:"read"`
}

// SQSCredential is one [[sqs_credentials]] entry.
type SQSCredential struct {
	AccessKeyID     string   `toml:"access_key_id"`
	SecretAccessKey string   `toml:"secret_access_key"`
	Account         string   `toml:"account"`
	Queues          []string `toml:"queues"` // allow-list; empty: every queue
}

// HTTPAuthConfig is the [http_auth] section. Users map a name to a hash from
// `sluice hash-password`.
type HTTPAuthConfig struct {
	Tokens []string          `toml:"tokens"`
	Users  map[string]string `toml:"users"`
	Realm  string            `toml:"realm"`
}

// TLSConfig is the [tls] section: PEM files for a certificate and its key.
type TLSConfig struct {
	Cert string `toml:"cert"`
	Key  string `toml:"key"`
}

// Options converts the section to the httpauth middleware's options.
func (c HTTPAuthConfig) Options() httpauth.Options {
	return httpauth.Options{Tokens: c.Tokens, Users: c.Users, Realm: c.Realm}
}

func (o *Options) sigv4Credentials() []sigv4.Credentials {
	out := make([]sigv4.Credentials, len(o.SQSCredentials))
	for i, c := range o.SQSCredentials {
		out[i] = sigv4.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, Account: c.Account, Queues: c.Queues}
	}
	return out
}

func (o *Options) amqpUsers() []amqp.User {
	out := make([]amqp.User, len(o.AMQPUsers))
	for i, u := range o.AMQPUsers {
		perms := make(map[string]amqp.Permission, len(u.Permissions))
		for vh, p := range u.Permissions {
			perms[vh] = amqp.Permission{Configure: p.Configure, Write: p.Write, Read: p.Read}
		}
		out[i] = amqp.User{Name: u.Name, PasswordHash: u.PasswordHash, Password: u.Password, Tags: u.Tags, Permissions: perms}
	}
	return out
}

// AlertsConfig is the [alerts] section: the built-in rules' thresholds
// (see docs/observability.md) and where transitions are POSTed. Durations
// are strings such as "15m".
type AlertsConfig struct {
	Interval           duration `toml:"interval"`
	DLQGrowthCount     int      `toml:"dlq_growth_count"`
	DLQGrowthWindow    duration `toml:"dlq_growth_window"`
	DLQDepthWarn       int      `toml:"dlq_depth_warn"`
	DLQDepthCritical   int      `toml:"dlq_depth_critical"`
	QueueDepthWarn     int      `toml:"queue_depth_warn"`
	QueueDepthCritical int      `toml:"queue_depth_critical"`
	OldestAgeWarn      duration `toml:"oldest_age_warn"`
	OldestAgeCritical  duration `toml:"oldest_age_critical"`
	NotConsumedAfter   duration `toml:"not_consumed_after"`
	Webhooks           []string `toml:"webhooks"`
	WebhookTimeout     duration `toml:"webhook_timeout"`
	WebhookMaxAttempts int      `toml:"webhook_max_attempts"`
}

// duration is a time.Duration written as a string ("15m") in TOML.
type duration time.Duration

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = duration(v)
	return err
}

func (d duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func alertsConfigFrom(o alerts.Options) AlertsConfig {
	return AlertsConfig{
		Interval: duration(o.Interval), DLQGrowthCount: o.DLQGrowthCount, DLQGrowthWindow: duration(o.DLQGrowthWindow),
		DLQDepthWarn: o.DLQDepthWarn, DLQDepthCritical: o.DLQDepthCritical,
		QueueDepthWarn: o.QueueDepthWarn, QueueDepthCritical: o.QueueDepthCritical,
		OldestAgeWarn: duration(o.OldestAgeWarn), OldestAgeCritical: duration(o.OldestAgeCritical),
		NotConsumedAfter: duration(o.NotConsumedAfter),
		Webhooks:         append([]string{}, o.Webhooks...), WebhookTimeout: duration(o.WebhookTimeout), WebhookMaxAttempts: o.WebhookMaxAttempts,
	}
}

// options converts the section to the alerts package's options, keeping
// that package's defaults for what the file cannot set.
func (c AlertsConfig) options() alerts.Options {
	o := alerts.DefaultOptions()
	o.Interval, o.DLQGrowthCount, o.DLQGrowthWindow = time.Duration(c.Interval), c.DLQGrowthCount, time.Duration(c.DLQGrowthWindow)
	o.DLQDepthWarn, o.DLQDepthCritical = c.DLQDepthWarn, c.DLQDepthCritical
	o.QueueDepthWarn, o.QueueDepthCritical = c.QueueDepthWarn, c.QueueDepthCritical
	o.OldestAgeWarn, o.OldestAgeCritical = time.Duration(c.OldestAgeWarn), time.Duration(c.OldestAgeCritical)
	o.NotConsumedAfter = time.Duration(c.NotConsumedAfter)
	o.Webhooks, o.WebhookTimeout, o.WebhookMaxAttempts = c.Webhooks, time.Duration(c.WebhookTimeout), c.WebhookMaxAttempts
	return o
}

// DefaultOptions returns the settings `sluice server` starts with.
func DefaultOptions() Options {
	return Options{
		DataDir:                 "./sluice-data",
		Store:                   "disk",
		SQSListen:               "127.0.0.1:9324",
		AMQPListen:              "127.0.0.1:5672",
		AMQPMaxMessageSize:      amqp.DefaultMaxMessageSize,
		AMQPProduct:             amqp.DefaultProduct,
		MaxHTTPConnections:      10000,
		MaxHTTPConnectionsPerIP: 2000,
		MinFreeDisk:             256 << 20,
		SQSSendFlowBacklog:      sqs.DefaultSendFlowBacklog,
		AccountID:               "000000000000",
		Region:                  "us-east-1",
		LogLevel:                "info",
		LogFormat:               "text",
		Alerts:                  alertsConfigFrom(alerts.DefaultOptions()),
	}
}

// LoadFile applies the TOML config file at path over o. Unknown keys are an
// error: a misspelt setting must not be silently ignored.
func (o *Options) LoadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	md, err := toml.Decode(string(data), o)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return fmt.Errorf("config %s: unknown setting(s): %s", path, strings.Join(keys, ", "))
	}
	return nil
}

// Validate checks every setting and returns all problems at once.
func (o *Options) Validate() error {
	var errs []error
	switch o.Store {
	case "disk":
		if o.DataDir == "" {
			errs = append(errs, errors.New("data_dir: must not be empty with store = \"disk\""))
		}
	case "memory":
	default:
		errs = append(errs, fmt.Errorf("store: %q is not one of disk, memory", o.Store))
	}
	httpSecured := len(o.SQSCredentials) > 0 && o.HTTPAuth.Options().Enabled()
	errs = append(errs, o.checkListen("sqs_listen", o.SQSListen, false, httpSecured,
		"configure [[sqs_credentials]] and [http_auth]")...)
	errs = append(errs, o.checkListen("amqp_listen", o.AMQPListen, true, len(o.AMQPUsers) > 0,
		"configure [[amqp_users]]")...)
	errs = append(errs, o.checkListen("amqps_listen", o.AMQPSListen, true, len(o.AMQPUsers) > 0,
		"configure [[amqp_users]]")...)
	if o.AMQPSListen != "" && o.TLS.Cert == "" {
		errs = append(errs, errors.New("amqps_listen: needs [tls] cert and key"))
	}
	if o.DebugListen != "" {
		if host, _, err := net.SplitHostPort(o.DebugListen); err != nil {
			errs = append(errs, fmt.Errorf("debug_listen: %q is not host:port: %v", o.DebugListen, err))
		} else if !isLoopback(host) {
			errs = append(errs, fmt.Errorf("debug_listen: %q is not a loopback address; the profiles it serves have no authentication, so it listens on loopback only (reach it through an SSH tunnel or kubectl port-forward; allow_non_loopback does not lift this)", o.DebugListen))
		}
	}
	if o.AMQPMaxMessageSize < 1 || o.AMQPMaxMessageSize > engine.MaxStoredMessageSize {
		errs = append(errs, fmt.Errorf("amqp_max_message_size: %d is not between 1 and %d bytes", o.AMQPMaxMessageSize, engine.MaxStoredMessageSize))
	}
	if o.AMQPProduct == "" {
		errs = append(errs, errors.New("amqp_product: must not be empty"))
	}
	if o.AMQPFlowMinBacklog < 0 {
		errs = append(errs, errors.New("amqp_flow_min_backlog: must not be negative (0: the default, 1000)"))
	}
	if o.AMQPFlowCreditFactor < 0 {
		errs = append(errs, errors.New("amqp_flow_credit_factor: must not be negative (0: the default, 4)"))
	}
	if o.SQSSendFlowBacklog < 0 {
		errs = append(errs, errors.New("sqs_send_flow_backlog: must not be negative (0: off, the default 2000)"))
	}
	if w := time.Duration(o.SQSSendFlowMaxWait); w < 0 || w > time.Second {
		errs = append(errs, errors.New("sqs_send_flow_max_wait: must be between 0 (200ms) and 1s"))
	}
	if time.Duration(o.AMQPFlowMaxWait) > time.Minute {
		errs = append(errs, errors.New("amqp_flow_max_wait: must be at most 1m (negative turns flow control off)"))
	}
	if o.MinFreeDisk < 0 {
		errs = append(errs, errors.New("min_free_disk: must not be negative"))
	}
	if o.HTTPBodyBudget < 0 {
		errs = append(errs, errors.New("http_body_budget: must not be negative"))
	} else if o.HTTPBodyBudget > 0 && o.HTTPBodyBudget < 5<<20 {
		errs = append(errs, errors.New("http_body_budget: must be at least 5 MiB (5242880), the largest SQS request"))
	}
	for _, h := range o.AllowedHosts {
		if !validHostPattern(h) {
			errs = append(errs, fmt.Errorf("allowed_hosts: %q is not a host name, *.domain or *", h))
		}
	}
	if o.MaxHTTPConnections < 0 {
		errs = append(errs, errors.New("max_http_connections: must not be negative"))
	}
	if o.MaxHTTPConnectionsPerIP < 0 {
		errs = append(errs, errors.New("max_http_connections_per_ip: must not be negative"))
	}
	if (o.TLS.Cert == "") != (o.TLS.Key == "") {
		errs = append(errs, errors.New("tls: cert and key go together"))
	}
	if len(o.SQSCredentials) > 0 {
		if err := (sigv4.Options{Credentials: o.sigv4Credentials()}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("sqs_credentials: %w", err))
		}
	}
	if err := o.HTTPAuth.Options().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("http_auth: %w", err))
	}
	if len(o.AccountID) != 12 || strings.Trim(o.AccountID, "0123456789") != "" {
		errs = append(errs, fmt.Errorf("account_id: %q must be 12 digits", o.AccountID))
	}
	if o.Region == "" || strings.ContainsAny(o.Region, " /:") {
		errs = append(errs, fmt.Errorf("region: %q is not a region name", o.Region))
	}
	switch o.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level: %q is not one of debug, info, warn, error", o.LogLevel))
	}
	switch o.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log_format: %q is not one of text, json", o.LogFormat))
	}
	if err := o.Alerts.options().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("alerts: %w", err))
	}
	errs = append(errs, o.validateCluster()...)
	return errors.Join(errs...)
}

// checkListen validates one listener address. Beyond loopback it needs
// its protocol's credentials, or allow_non_loopback said on purpose.
func (o *Options) checkListen(key, addr string, optional, secured bool, how string) []error {
	if addr == "" {
		if optional {
			return nil
		}
		return []error{fmt.Errorf("%s: must not be empty", key)}
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return []error{fmt.Errorf("%s: %q is not host:port: %v", key, addr, err)}
	}
	if !isLoopback(host) && !secured && !o.AllowNonLoopback {
		return []error{fmt.Errorf("%s: %q is not a loopback address and no credentials are configured; %s, or set allow_non_loopback (--allow-non-loopback) to expose it without them on purpose", key, addr, how)}
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
