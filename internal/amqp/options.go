package amqp

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/engine"
)

// Defaults, as RabbitMQ's.
const (
	DefaultFrameMax        = 131072
	DefaultChannelMax      = 2047
	DefaultHeartbeat       = 60 * time.Second
	DefaultConsumerTimeout = 30 * time.Minute
	// DefaultProduct is the product name in connection.start's
	// server-properties.
	DefaultProduct = "Sluice"

	DefaultMaxConnections         = 4096
	DefaultMaxConsumersPerChannel = 1024
	DefaultMaxUnackedPerChannel   = 65536
	DefaultWriteTimeout           = 30 * time.Second
	DefaultOutgoingBuffer         = 1 << 20
	// DefaultMaxMessageSize is RabbitMQ 4.x's max_message_size (16 MiB;
	// 3.x allowed 128 MiB).
	DefaultMaxMessageSize = 16 << 20
)

// Options configure a Server. The zero value is usable: every zero field
// takes its default.
type Options struct {
	Logger *slog.Logger // nil: discard
	// Clock drives queue expiry (x-expires) and consumer timeouts; it
	// should be the engine's clock. nil: clock.Real. Heartbeats always use
	// the wall clock: they watch a socket, not the broker's time.
	Clock clock.Clock

	// Users who may log in. Empty: one user guest/guest, administrator,
	// with every permission on "/", who may connect only from a loopback
	// address (RabbitMQ's default).
	Users []User

	// FrameMax is the largest frame the server proposes and accepts
	// (default 131072, at least 4096). A client asking for more in
	// tune-ok is refused with 530.
	FrameMax uint32
	// ChannelMax is proposed in connection.tune (default 2047, as
	// RabbitMQ: amqp091-go's test suite expects exactly that).
	ChannelMax uint16
	// Heartbeat is the interval the server proposes (default 60s). The
	// client's tune-ok decides; 0 there turns heartbeats off.
	Heartbeat time.Duration
	// ConsumerTimeout is how long a delivery may stay unacknowledged
	// before its channel is closed with 406 (default 30 minutes). It is
	// also the engine lease of every delivered message, plus a margin.
	ConsumerTimeout time.Duration

	// MaxConnections bounds the open connections (default 4096; negative:
	// no limit). Over it a client is refused as RabbitMQ's connection_max
	// does: connection.open gets 530 NOT_ALLOWED - connection refused:
	// node connection limit (N) is reached.
	MaxConnections int
	// MaxConsumersPerChannel bounds basic.consume per channel (default
	// 1024; negative: no limit). One more closes the connection with
	// RabbitMQ's consumer_max_per_channel error, 530 NOT_ALLOWED - reached
	// maximum (N) of consumers per channel.
	MaxConsumersPerChannel int
	// MaxUnackedPerChannel bounds a channel's unacknowledged deliveries
	// when no prefetch limit is lower (default 65536; negative: no limit).
	// RabbitMQ has no such limit; here deliveries beyond it wait for acks
	// and basic.get answers get-empty.
	MaxUnackedPerChannel int
	// WriteTimeout is how long one socket write may take (default 30s): a
	// connection whose client stops reading is closed after it, and its
	// unacknowledged messages go back to their queues.
	WriteTimeout time.Duration
	// OutgoingBuffer bounds the bytes of frames a connection may have
	// waiting for its socket (default 1 MiB; at least one message always
	// fits). Consumers wait for room rather than buffer more.
	OutgoingBuffer int

	// MaxPartialBytesPerConnection caps the bytes of message bodies a
	// connection may have partly received, over all its channels (default
	// 16 MiB; negative: no limit). Over it the connection is closed with
	// 506 RESOURCE_ERROR (limits.go).
	MaxPartialBytesPerConnection int
	// MaxTxBytesPerConnection caps the bytes of publishes a connection may
	// hold in uncommitted transactions (default 32 MiB; negative: no
	// limit). The publish that passes it closes its channel with 406
	// PRECONDITION_FAILED, rolling that transaction back.
	MaxTxBytesPerConnection int

	// MaxHandshakes bounds the connections that have not finished
	// connection.open (default 64; negative: no limit); one more closes
	// the one handshaking longest. HandshakeTimeout is the time a client
	// has to finish it (default 5 s). MaxConnectionsPerIP bounds the
	// connections from one IP address (default 1024; negative: no limit);
	// one more is closed at accept. See slots.go.
	MaxHandshakes       int
	HandshakeTimeout    time.Duration
	MaxConnectionsPerIP int

	// Product is server-properties' "product" (default "Sluice"). Some
	// client test suites run certain tests only against "RabbitMQ".
	Product string

	// MaxMessageSize is the largest message body a publish may carry
	// (default DefaultMaxMessageSize, RabbitMQ 4.x's 16 MiB; at most
	// engine.MaxStoredMessageSize, 512 MiB, RabbitMQ's hard limit).
	// Larger: the channel closes with 406 PRECONDITION_FAILED - message
	// size N is larger than configured max size M. Messages this large
	// are also received whole over SQS, whose own sends stay at 1 MiB.
	MaxMessageSize int

	// Publisher flow control (flow.go, docs/amqp-compat.md "Flow
	// control"): a queue with consumers whose ready backlog exceeds
	// max(FlowMinBacklog, FlowCreditFactor × the sum of its consumers'
	// prefetch) pauses the reading of the connections publishing to it,
	// each pause at most FlowMaxWait, until the backlog is back to half
	// that mark. FlowMinBacklog defaults to 1000 and FlowCreditFactor to
	// 4 (both at least 1); FlowMaxWait defaults to 1 s, negative turns
	// flow control off.
	FlowMinBacklog   int
	FlowCreditFactor int
	FlowMaxWait      time.Duration

	// Elsewhere, when set, names the queues that live outside this
	// server's own store (a cluster's other shards; the Engine reaches
	// them).
	Elsewhere Elsewhere
}

// User is an account that may log in.
type User struct {
	Name string
	// PasswordHash is "sha256:<salt-hex>:<hash-hex>" where hash is
	// SHA-256(salt || password); password.Hash (package
	// internal/auth/password) makes one. When it is empty,
	// Password (plaintext, for tests and development) is used instead.
	PasswordHash string
	Password     string
	// Tags are recorded, as RabbitMQ's user tags ("administrator", …);
	// Sluice does not yet give them meaning.
	Tags []string
	// Permissions per vhost. Every vhost named here exists; "/" always
	// exists.
	Permissions map[string]Permission
}

// Permission holds RabbitMQ's three permission regular expressions for a
// vhost. A resource is allowed when its name matches (unanchored, as in
// RabbitMQ; use ^…$ to anchor); an empty expression allows nothing.
//
//   - Configure: declare and delete queues and exchanges.
//   - Write: publish to an exchange; bind to a queue or exchange (the
//     destination).
//   - Read: consume, get and purge a queue; bind from an exchange (the
//     source).
type Permission struct {
	Configure, Write, Read string
}

// user is a User ready for use.
type user struct {
	name     string
	verifier func(password string) bool
	tags     []string
	perms    map[string]*perm
	loopback bool // may connect only from a loopback address
}

type perm struct {
	configure, write, read *regexp.Regexp // nil: nothing allowed
	// anyConfigure, anyWrite, anyRead: the pattern matches every name
	// (".*", RabbitMQ's default, checked on every publish), so no
	// regexp runs.
	anyConfigure, anyWrite, anyRead bool
}

func (o *Options) withDefaults() Options {
	r := *o
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	if r.Clock == nil {
		r.Clock = clock.Real{}
	}
	if r.FrameMax == 0 {
		r.FrameMax = DefaultFrameMax
	}
	if r.ChannelMax == 0 {
		r.ChannelMax = DefaultChannelMax
	}
	if r.Heartbeat == 0 {
		r.Heartbeat = DefaultHeartbeat
	}
	if r.ConsumerTimeout == 0 {
		r.ConsumerTimeout = DefaultConsumerTimeout
	}
	if r.Product == "" {
		r.Product = DefaultProduct
	}
	if r.MaxConnections == 0 {
		r.MaxConnections = DefaultMaxConnections
	}
	if r.MaxConsumersPerChannel == 0 {
		r.MaxConsumersPerChannel = DefaultMaxConsumersPerChannel
	}
	if r.MaxUnackedPerChannel == 0 {
		r.MaxUnackedPerChannel = DefaultMaxUnackedPerChannel
	}
	if r.WriteTimeout == 0 {
		r.WriteTimeout = DefaultWriteTimeout
	}
	if r.MaxHandshakes == 0 {
		r.MaxHandshakes = DefaultMaxHandshakes
	}
	if r.HandshakeTimeout <= 0 {
		r.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if r.MaxConnectionsPerIP == 0 {
		r.MaxConnectionsPerIP = DefaultMaxConnectionsPerIP
	}
	if r.MaxPartialBytesPerConnection == 0 {
		r.MaxPartialBytesPerConnection = DefaultMaxPartialBytesPerConnection
	}
	if r.MaxTxBytesPerConnection == 0 {
		r.MaxTxBytesPerConnection = DefaultMaxTxBytesPerConnection
	}
	if r.OutgoingBuffer <= 0 {
		r.OutgoingBuffer = DefaultOutgoingBuffer
	}
	if r.MaxMessageSize == 0 {
		r.MaxMessageSize = DefaultMaxMessageSize
	}
	if r.FlowMinBacklog == 0 {
		r.FlowMinBacklog = DefaultFlowMinBacklog
	}
	if r.FlowCreditFactor == 0 {
		r.FlowCreditFactor = DefaultFlowCreditFactor
	}
	if r.FlowMaxWait == 0 {
		r.FlowMaxWait = DefaultFlowMaxWait
	}
	return r
}

// validate checks the options (after defaults) and compiles the users.
func (o *Options) validate() (map[string]*user, error) {
	if o.FrameMax < wire.FrameMinSize {
		return nil, fmt.Errorf("amqp: FrameMax %d is below the minimum %d", o.FrameMax, wire.FrameMinSize)
	}
	if o.Heartbeat < 0 || o.Heartbeat > 65535*time.Second {
		return nil, errors.New("amqp: Heartbeat must be between 0 and 65535s")
	}
	if o.ConsumerTimeout < time.Second || o.ConsumerTimeout > engine.MaxVisibility-time.Minute {
		return nil, errors.New("amqp: ConsumerTimeout must be between 1s and 11h59m")
	}
	if o.WriteTimeout < 0 {
		return nil, errors.New("amqp: WriteTimeout must not be negative")
	}
	if o.MaxMessageSize < 1 || o.MaxMessageSize > engine.MaxStoredMessageSize {
		return nil, fmt.Errorf("amqp: MaxMessageSize must be between 1 and %d bytes", engine.MaxStoredMessageSize)
	}
	if o.FlowMinBacklog < 1 || o.FlowCreditFactor < 1 {
		return nil, errors.New("amqp: FlowMinBacklog and FlowCreditFactor must be at least 1")
	}
	if o.FlowMaxWait > time.Minute {
		return nil, errors.New("amqp: FlowMaxWait must be at most 1m")
	}
	users := make(map[string]*user)
	if len(o.Users) == 0 {
		u, _ := compileUser(User{Name: "guest", Password: "guest", Tags: []string{"administrator"},
			Permissions: map[string]Permission{"/": {Configure: ".*", Write: ".*", Read: ".*"}}})
		u.loopback = true
		users[u.name] = u
		return users, nil
	}
	for _, cu := range o.Users {
		if _, dup := users[cu.Name]; dup {
			return nil, fmt.Errorf("amqp: user %q is listed twice", cu.Name)
		}
		u, err := compileUser(cu)
		if err != nil {
			return nil, err
		}
		users[u.name] = u
	}
	return users, nil
}
