package bench

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// AMQPOptions configures one run of the AMQP 0-9-1 load generator
// (`sluice bench amqp`). Start from DefaultAMQPOptions (RegisterFlags seeds
// the flags from it); RunAMQP calls Validate itself.
type AMQPOptions struct {
	// URL is the broker, amqp://user:pass@host:port/vhost.
	URL string
	// Queue is declared as a durable queue with QueueArgs (none: a
	// classic queue) and purged before the run.
	Queue string
	// QueueArgs are the queue.declare arguments, e.g. x-queue-type=quorum
	// for a RabbitMQ quorum queue (flag -queue-arg key=value, repeatable;
	// see ParseQueueArg for the value types).
	QueueArgs map[string]any
	// Producers and Consumers each hold their own connection and channel.
	Producers int
	Consumers int
	// Size is the body size in bytes (at least AMQPPrefixLen: the run id and
	// the send timestamp).
	Size int
	// Duration is how long producers publish. Consumers then drain what was
	// confirmed, for at most DrainTimeout.
	Duration time.Duration
	// Rate, when > 0, is the aggregate publish rate in messages per second,
	// spread evenly over the producers (for latency). 0: as fast as the
	// confirm window allows.
	Rate float64
	// ConfirmWindow is how many publishes each producer may have awaiting
	// their publisher confirm (the channel is in confirm mode).
	ConfirmWindow int
	// Prefetch is each consumer's basic.qos prefetch count (manual acks).
	Prefetch int
	// AckEvery, when > 1, acks with multiple=true once every AckEvery
	// deliveries (and when the delivery channel is idle) instead of acking
	// each delivery on its own.
	AckEvery int
	// NoAck consumes with automatic acknowledgement (basic.consume
	// no-ack): the broker settles each delivery as it sends it, and
	// Prefetch and AckEvery do not apply.
	NoAck bool
	// Persistent publishes with delivery-mode 2.
	Persistent bool
	// Priorities, when > 0, publishes with the priority property cycling
	// through 0 … Priorities, message by message (backlog included): with
	// -queue-arg x-max-priority=N, the load of a priority queue.
	Priorities int
	// Backlog, when > 0, is how many messages (of another run id, so they
	// count as Stale) are published to the purged queue, with no consumer,
	// before the consumers subscribe and the timed run begins: the night
	// after a consumer outage, consumers draining an old backlog while the
	// producers go on.
	Backlog int
	// PID, when > 0, is the broker's process id; its CPU time is reported
	// per 100,000 messages.
	PID int
	// JSON prints the result as one JSON object instead of a table.
	JSON bool
	// DrainTimeout bounds how long consumers wait after the last publish
	// for confirmed messages that have not arrived.
	DrainTimeout time.Duration
}

// DefaultAMQPOptions returns the defaults that RegisterFlags shows.
func DefaultAMQPOptions() AMQPOptions {
	return AMQPOptions{
		URL:           "amqp://guest:guest@127.0.0.1:5672/",
		Queue:         "bench",
		Producers:     4,
		Consumers:     4,
		Size:          1024,
		Duration:      20 * time.Second,
		ConfirmWindow: 256,
		Prefetch:      100,
		AckEvery:      1,
		Persistent:    true,
		DrainTimeout:  30 * time.Second,
	}
}

// RegisterFlags defines one flag per option on fs with o's values as
// defaults; a zero AMQPOptions is first replaced by DefaultAMQPOptions.
func (o *AMQPOptions) RegisterFlags(fs *flag.FlagSet) {
	if reflect.ValueOf(*o).IsZero() {
		*o = DefaultAMQPOptions()
	}
	fs.StringVar(&o.URL, "url", o.URL, "broker URL amqp://user:pass@host:port/vhost")
	fs.StringVar(&o.Queue, "queue", o.Queue, "durable queue to declare, purge and use")
	fs.Func("queue-arg", "queue.declare argument key=value, repeatable (e.g. x-queue-type=quorum; an integer value is sent as a long)", func(s string) error {
		k, v, err := ParseQueueArg(s)
		if err != nil {
			return err
		}
		if o.QueueArgs == nil {
			o.QueueArgs = map[string]any{}
		}
		o.QueueArgs[k] = v
		return nil
	})
	fs.IntVar(&o.Producers, "producers", o.Producers, "publishing connections")
	fs.IntVar(&o.Consumers, "consumers", o.Consumers, "consuming connections")
	fs.IntVar(&o.Size, "size", o.Size, fmt.Sprintf("message body size in bytes (>= %d)", AMQPPrefixLen))
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long to publish")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "aggregate publish rate in msg/s (0 = as fast as confirms allow)")
	fs.IntVar(&o.ConfirmWindow, "confirm-window", o.ConfirmWindow, "unconfirmed publishes allowed per producer")
	fs.IntVar(&o.Prefetch, "prefetch", o.Prefetch, "basic.qos prefetch count per consumer")
	fs.IntVar(&o.AckEvery, "ack-every", o.AckEvery, "ack with multiple=true every N deliveries (1 = ack each delivery)")
	fs.BoolVar(&o.NoAck, "no-ack", o.NoAck, "consume with automatic acknowledgement (no basic.ack; -prefetch and -ack-every do not apply)")
	fs.BoolVar(&o.Persistent, "persistent", o.Persistent, "publish with delivery-mode 2 (persistent)")
	fs.IntVar(&o.Priorities, "priorities", o.Priorities, "publish priorities 0..N in turn (0 = no priority property; use with -queue-arg x-max-priority=N)")
	fs.IntVar(&o.Backlog, "backlog", o.Backlog, "messages published before the run with no consumer (an old backlog the consumers drain while producers go on)")
	fs.IntVar(&o.PID, "pid", o.PID, "broker PID: report its CPU-seconds per 100,000 messages")
	fs.BoolVar(&o.JSON, "json", o.JSON, "print the result as JSON")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", o.DrainTimeout, "how long consumers wait for confirmed messages after the last publish")
}

// ParseQueueArg parses one -queue-arg, key=value: a value that is a
// decimal integer becomes an int64 (an AMQP long, as x-max-length wants),
// any other a string (x-queue-type=quorum). The key must be 1-255 bytes.
func ParseQueueArg(s string) (string, any, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || len(k) > 255 {
		return "", nil, fmt.Errorf("bench: -queue-arg %q: want key=value with a 1-255 byte key", s)
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return k, n, nil
	}
	return k, v, nil
}

// Validate reports the first invalid option.
func (o *AMQPOptions) Validate() error {
	u, err := url.Parse(o.URL)
	switch {
	case err != nil:
		return fmt.Errorf("bench: -url: %w", err)
	case u.Scheme != "amqp" && u.Scheme != "amqps" || u.Host == "":
		return fmt.Errorf("bench: -url %q: want amqp://user:pass@host:port/", redactURL(o.URL))
	case o.Queue == "" || len(o.Queue) > 255:
		return errors.New("bench: -queue must be 1-255 bytes")
	case o.Producers < 1 || o.Consumers < 1:
		return errors.New("bench: -producers and -consumers must be >= 1")
	case o.Size < AMQPPrefixLen || o.Size > 1<<20:
		return fmt.Errorf("bench: -size %d: must be %d-%d bytes", o.Size, AMQPPrefixLen, 1<<20)
	case o.Duration <= 0:
		return errors.New("bench: -duration must be > 0")
	case o.Rate < 0:
		return errors.New("bench: -rate must be >= 0")
	case o.ConfirmWindow < 1 || o.ConfirmWindow > 1<<16:
		return errors.New("bench: -confirm-window must be 1-65536")
	case o.Prefetch < 0 || o.Prefetch > 65535:
		return errors.New("bench: -prefetch must be 0-65535")
	case o.AckEvery < 1 || o.Prefetch > 0 && o.AckEvery > o.Prefetch:
		return errors.New("bench: -ack-every must be 1 up to -prefetch")
	case o.PID < 0:
		return errors.New("bench: -pid must be >= 0")
	case o.Backlog < 0:
		return errors.New("bench: -backlog must be >= 0")
	case o.Priorities < 0 || o.Priorities > 255:
		return errors.New("bench: -priorities must be 0-255")
	case o.DrainTimeout < 0:
		return errors.New("bench: -drain-timeout must be >= 0")
	}
	return nil
}

// redactURL hides the password of an AMQP URL for printing.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
