package bench

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// SQSOptions configures one run of the SQS load generator. The zero value is
// not useful: start from DefaultSQSOptions (RegisterFlags seeds the flags from
// it) and call Validate, which RunSQS does itself.
type SQSOptions struct {
	// Endpoint is the broker's SQS base URL, e.g. http://127.0.0.1:9324.
	Endpoint string
	// Queue is the queue name. It is created with CreateQueue when missing;
	// with FIFO set and no ".fifo" suffix, the suffix is added.
	Queue string
	// Producers and Consumers are the number of concurrent senders and
	// receivers. Each holds one HTTP connection at a time.
	Producers int
	Consumers int
	// Batch is the entries per SendMessageBatch and the MaxNumberOfMessages
	// of each ReceiveMessage (1–10).
	Batch int
	// Size is the body size in bytes. The first PrefixLen bytes carry the run
	// id and the send timestamp, so Size must be at least PrefixLen.
	Size int
	// Duration is how long producers send when Messages is 0. Consumers then
	// drain what was sent, for at most DrainTimeout.
	Duration time.Duration
	// Messages, when > 0, sends exactly this many messages and ends when all
	// were received (or DrainTimeout after the last send); Duration is then
	// ignored.
	Messages int
	// Backlog, when > 0, is how many messages (of another run id, so that
	// the consumers count them as Stale) the producers send, as fast as
	// they can and with nobody receiving, before the timed run begins: the
	// consumers then drain that old backlog while the producers go on,
	// as after a consumer outage.
	Backlog int
	// Rate, when > 0, is the aggregate send rate in messages per second,
	// spread evenly over the producers (for latency measurements). 0 sends as
	// fast as the broker accepts.
	Rate float64
	// Wait is the ReceiveMessage long-poll time in whole seconds (0–20).
	Wait int
	// Visibility is the VisibilityTimeout each receive asks for, in whole
	// seconds. Long enough that a delete right after the receive never races
	// a redelivery.
	Visibility int
	// FIFO makes the queue a FIFO queue; every message gets a unique
	// deduplication id and one of Producers×Batch message groups.
	FIFO bool
	// PID, when > 0, is the broker's process id: its CPU time (utime+stime
	// from /proc/PID/stat) is read before and after the run and reported per
	// 100,000 messages.
	PID int
	// JSON prints the result as one JSON object instead of a table.
	JSON bool
	// DrainTimeout bounds how long consumers keep receiving after the last
	// send while messages are still missing.
	DrainTimeout time.Duration
}

// DefaultSQSOptions returns the defaults that RegisterFlags shows.
func DefaultSQSOptions() SQSOptions {
	return SQSOptions{
		Endpoint:     "http://127.0.0.1:9324",
		Queue:        "bench",
		Producers:    4,
		Consumers:    4,
		Batch:        10,
		Size:         1024,
		Duration:     10 * time.Second,
		Wait:         1,
		Visibility:   30,
		DrainTimeout: 30 * time.Second,
	}
}

// RegisterFlags defines one flag per option on fs, with o's current values as
// defaults; the zero SQSOptions is first replaced by DefaultSQSOptions, so
//
//	var o bench.SQSOptions
//	o.RegisterFlags(fs)
//
// is enough for `sluice bench sqs [flags]`.
func (o *SQSOptions) RegisterFlags(fs *flag.FlagSet) {
	if *o == (SQSOptions{}) {
		*o = DefaultSQSOptions()
	}
	fs.StringVar(&o.Endpoint, "endpoint", o.Endpoint, "broker SQS endpoint URL")
	fs.StringVar(&o.Queue, "queue", o.Queue, "queue name (created if missing)")
	fs.IntVar(&o.Producers, "producers", o.Producers, "concurrent senders")
	fs.IntVar(&o.Consumers, "consumers", o.Consumers, "concurrent receivers (0: send only, the messages stay in the queue)")
	fs.IntVar(&o.Batch, "batch", o.Batch, "messages per SendMessageBatch / ReceiveMessage (1-10)")
	fs.IntVar(&o.Size, "size", o.Size, fmt.Sprintf("message body size in bytes (>= %d)", PrefixLen))
	fs.DurationVar(&o.Duration, "duration", o.Duration, "send duration (ignored with -messages)")
	fs.IntVar(&o.Messages, "messages", o.Messages, "send exactly this many messages (0 = run for -duration)")
	fs.IntVar(&o.Backlog, "backlog", o.Backlog, "messages sent before the run with nobody receiving (an old backlog the consumers drain while producers go on)")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "aggregate send rate in msg/s (0 = as fast as possible)")
	fs.IntVar(&o.Wait, "wait", o.Wait, "ReceiveMessage long-poll seconds (0-20)")
	fs.IntVar(&o.Visibility, "visibility", o.Visibility, "ReceiveMessage visibility timeout in seconds")
	fs.BoolVar(&o.FIFO, "fifo", o.FIFO, "use a FIFO queue")
	fs.IntVar(&o.PID, "pid", o.PID, "broker PID: report its CPU-seconds per 100,000 messages")
	fs.BoolVar(&o.JSON, "json", o.JSON, "print the result as JSON")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", o.DrainTimeout, "how long consumers wait for missing messages after the last send")
}

// Validate reports the first invalid option.
func (o *SQSOptions) Validate() error {
	u, err := url.Parse(o.Endpoint)
	switch {
	case err != nil:
		return fmt.Errorf("bench: -endpoint: %w", err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("bench: -endpoint %q: want http://host:port", o.Endpoint)
	case o.Queue == "" || len(o.Queue) > 80:
		return errors.New("bench: -queue must be 1-80 characters")
	case o.Producers < 1 || o.Consumers < 0:
		return errors.New("bench: -producers must be >= 1 and -consumers >= 0")
	case o.Batch < 1 || o.Batch > 10:
		return fmt.Errorf("bench: -batch %d: must be 1-10", o.Batch)
	case o.Size < PrefixLen || o.Size > 256*1024:
		return fmt.Errorf("bench: -size %d: must be %d-%d bytes", o.Size, PrefixLen, 256*1024)
	case o.Messages < 0:
		return errors.New("bench: -messages must be >= 0")
	case o.Backlog < 0:
		return errors.New("bench: -backlog must be >= 0")
	case o.Messages == 0 && o.Duration <= 0:
		return errors.New("bench: -duration must be > 0 when -messages is 0")
	case o.Rate < 0:
		return errors.New("bench: -rate must be >= 0")
	case o.Wait < 0 || o.Wait > 20:
		return fmt.Errorf("bench: -wait %d: must be 0-20", o.Wait)
	case o.Visibility < 1 || o.Visibility > 43200:
		return fmt.Errorf("bench: -visibility %d: must be 1-43200", o.Visibility)
	case o.PID < 0:
		return errors.New("bench: -pid must be >= 0")
	case o.DrainTimeout < 0:
		return errors.New("bench: -drain-timeout must be >= 0")
	}
	return nil
}

// queueName is the name to create: FIFO queues need the ".fifo" suffix.
func (o *SQSOptions) queueName() string {
	if o.FIFO && !strings.HasSuffix(o.Queue, ".fifo") {
		return o.Queue + ".fifo"
	}
	return o.Queue
}
