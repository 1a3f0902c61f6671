// Command sluice-dlq inspects and redrives the dead letters the worker
// SDK's Kafka, NATS JetStream, Redis Streams and Google Pub/Sub
// transports write, with the safety of Sluice's own redrive: peek with
// failure context, filter, dry run, rate limit, and a stop when redriven
// messages fail again. It lives in the worker module so that the broker
// binary carries none of these clients; `sluice dlq` serves Sluice's own
// queues.
//
//	sluice-dlq peek    --source URL [--limit N] [filters]
//	sluice-dlq redrive --source URL [--dry-run] [--rate R] [--max N]
//	                   [--safety-threshold N] [--safety-window D] [filters]
//
// Sources:
//
//	kafka://host:9092[,host2:9092]/orders.dlq[?group=G&target=TOPIC]
//	nats://host:4222/ORDERS_DLQ[?target=SUBJECT]
//	redis://host:6379/orders.dlq[?target=STREAM&body=FIELD]   (redis+unix:///path/to.sock?stream=orders.dlq)
//	pubsub://PROJECT/billing-dlq-sub?target=TOPIC[&emulator=host:port]
//
// Filters: --class (error class), --reason (terminal, max_attempts,
// delivery_exceeded), --contains (substring of the error message).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicemq/sluice/worker/dlq"
	"github.com/sluicemq/sluice/worker/gcppubsub"
	"github.com/sluicemq/sluice/worker/kafka"
	"github.com/sluicemq/sluice/worker/natsjs"
	"github.com/sluicemq/sluice/worker/redisstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = "usage: sluice-dlq peek|redrive --source URL [flags] (sluice-dlq <command> -h for the flags)"

// run is the command; it returns the exit status (0 done, 1 failed, 2
// usage, 3 the redrive's safety stop fired).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "peek" && args[0] != "redrive") {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	cmd := args[0]
	fs := flag.NewFlagSet("sluice-dlq "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	source := fs.String("source", "", "the DLQ: kafka://, nats://, redis://, redis+unix:// or pubsub:// URL (see the package doc)")
	class := fs.String("class", "", "only entries with this error class")
	reason := fs.String("reason", "", "only entries with this dead-letter reason")
	contains := fs.String("contains", "", "only entries whose error message contains this")
	limit := fs.Int("limit", 20, "peek: most entries shown")
	dry := fs.Bool("dry-run", false, "redrive: count and sample what would move; move nothing")
	rate := fs.Float64("rate", 10, "redrive: most entries per second")
	maxN := fs.Int("max", 0, "redrive: most entries moved (0: all)")
	thr := fs.Int("safety-threshold", 1, "redrive: stop once this many redriven messages are dead-lettered again (-1: never)")
	window := fs.Duration("safety-window", 5*time.Second, "redrive: how long to watch for re-failures after the last entry")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *source == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	store, closeStore, err := open(ctx, *source)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-dlq: %v\n", err)
		return 2
	}
	defer closeStore()
	filter := func(e dlq.Entry) bool {
		c := e.Context
		return (*class == "" || c.ErrorClass == *class) && (*reason == "" || c.Reason == *reason) &&
			(*contains == "" || strings.Contains(c.ErrorMessage, *contains))
	}
	if cmd == "peek" {
		return peek(ctx, store, filter, *limit, stdout, stderr)
	}
	rep, err := dlq.Redrive(ctx, store, dlq.Options{Filter: filter, DryRun: *dry, Rate: *rate, Max: *maxN,
		SafetyThreshold: *thr, SafetyWindow: *window,
		Progress: func(e dlq.Entry) { fmt.Fprintf(stdout, "redriven %s\n", e.ID) }})
	for _, e := range rep.Sample {
		if *dry {
			fmt.Fprintf(stdout, "would redrive %s\n", e)
		}
	}
	fmt.Fprintf(stdout, "scanned=%d matched=%d redriven=%d refailed=%d dry_run=%v stopped=%v\n",
		rep.Scanned, rep.Matched, rep.Redriven, rep.Refailed, *dry, rep.Stopped)
	switch {
	case errors.Is(err, dlq.ErrSafetyStop):
		fmt.Fprintf(stderr, "sluice-dlq: %v; the rest stays in the DLQ. Fix the consumer, then redrive again.\n", err)
		return 3
	case err != nil:
		fmt.Fprintf(stderr, "sluice-dlq: %v\n", err)
		return 1
	}
	return 0
}

func peek(ctx context.Context, s dlq.Store, filter func(dlq.Entry) bool, limit int, stdout, stderr io.Writer) int {
	cursor, shown, total := "", 0, 0
	for {
		es, next, err := s.List(ctx, cursor, 100)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-dlq: %v\n", err)
			return 1
		}
		if len(es) == 0 {
			break
		}
		cursor = next
		for _, e := range es {
			if !filter(e) {
				continue
			}
			total++
			if shown < limit {
				shown++
				fmt.Fprintln(stdout, e)
				fmt.Fprintf(stdout, "  body: %q\n", truncate(string(e.Body), 200))
				if e.Context.Trace != "" {
					fmt.Fprintf(stdout, "  trace: %s\n", truncate(strings.ReplaceAll(e.Context.Trace, "\n", " | "), 300))
				}
			}
		}
	}
	fmt.Fprintf(stdout, "%d matching entries (%d shown)\n", total, shown)
	return 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// open connects to the DLQ a source URL names.
func open(ctx context.Context, raw string) (dlq.Store, func(), error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("bad --source: %v", err)
	}
	q := u.Query()
	name := strings.TrimPrefix(u.Path, "/")
	switch u.Scheme {
	case "kafka":
		if u.Host == "" || name == "" {
			return nil, nil, errors.New("kafka source: kafka://host:port[,host:port]/dlq-topic")
		}
		d, err := kafka.NewDLQ(strings.Split(u.Host, ","), name, q.Get("group"), q.Get("target"))
		if err != nil {
			return nil, nil, err
		}
		return d, d.Close, nil
	case "nats":
		if name == "" {
			return nil, nil, errors.New("nats source: nats://host:port/DLQ_STREAM")
		}
		nc, err := nats.Connect("nats://" + u.Host)
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return natsjs.NewDLQ(js, name, q.Get("target")), nc.Close, nil
	case "redis", "redis+unix":
		o := &redis.Options{Addr: u.Host}
		stream := name
		if u.Scheme == "redis+unix" {
			o = &redis.Options{Network: "unix", Addr: u.Path}
			stream = q.Get("stream")
		}
		if stream == "" {
			return nil, nil, errors.New("redis source: redis://host:port/dlq-stream or redis+unix:///path.sock?stream=dlq-stream")
		}
		rdb := redis.NewClient(o)
		return redisstream.NewDLQ(rdb, stream, q.Get("body"), q.Get("target")), func() { rdb.Close() }, nil
	case "pubsub":
		if u.Host == "" || name == "" || q.Get("target") == "" {
			return nil, nil, errors.New("pubsub source: pubsub://PROJECT/dlq-subscription?target=TOPIC")
		}
		var opts []option.ClientOption
		if em := q.Get("emulator"); em != "" {
			conn, err := grpc.NewClient(em, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, nil, err
			}
			opts = append(opts, option.WithGRPCConn(conn))
		}
		c, err := pubsub.NewClient(ctx, u.Host, opts...)
		if err != nil {
			return nil, nil, err
		}
		d, err := gcppubsub.NewDLQ(c, name, q.Get("target"), 0)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return d, func() { d.Close(); c.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown source scheme %q (kafka, nats, redis, redis+unix, pubsub)", u.Scheme)
}
