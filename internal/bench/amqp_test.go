package bench_test

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/bench"
	"github.com/sluicemq/sluice/test/crash"
)

// TestRunAMQPAgainstServer runs `sluice bench amqp` for about a second
// against the real sluice binary (built from ./cmd/sluice, or $SLUICE_BIN).
func TestRunAMQPAgainstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := os.Getenv("SLUICE_BIN")
	if bin == "" {
		var err error
		if bin, err = crash.Build(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	srv, err := crash.Start(context.Background(), bin, dir, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(10 * time.Second); err != nil {
			t.Log(err)
		}
	}()
	b, err := os.ReadFile(filepath.Join(dir, "ready.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rf struct{ AMQP string }
	if err := json.Unmarshal(b, &rf); err != nil || rf.AMQP == "" {
		t.Fatalf("ready file %q: no amqp address (%v)", b, err)
	}

	url := "amqp://guest:guest@" + rf.AMQP + "/"
	for _, run := range []struct {
		ackEvery int
		noAck    bool
		backlog  int
	}{{1, false, 0}, {10, false, 0}, {1, true, 0}, {1, false, 500}} {
		o := bench.DefaultAMQPOptions()
		o.URL, o.Duration, o.Producers, o.Consumers, o.PID = url, time.Second, 2, 2, srv.PID
		o.Rate, o.AckEvery, o.NoAck, o.Backlog = 2000, run.ackEvery, run.noAck, run.backlog
		if run.ackEvery == 10 {
			// The declare carries -queue-arg (a quorum queue, as
			// scripts/bench-quorum.sh asks RabbitMQ for).
			o.Queue, o.QueueArgs = "bench-quorum", map[string]any{"x-queue-type": "quorum"}
		}
		if run.backlog > 0 {
			// A priority queue, its backlog and run publishing
			// priorities in turn (-priorities).
			o.Queue, o.QueueArgs, o.Priorities = "bench-prio", map[string]any{"x-max-priority": int64(9)}, 9
		}
		var out strings.Builder
		res, err := bench.RunAMQP(context.Background(), o, &out)
		t.Logf("ack-every=%d no-ack=%t\n%s", run.ackEvery, run.noAck, out.String())
		if err != nil {
			t.Fatalf("%v\nserver log: %s", err, crash.Tail(dir))
		}
		if res.Confirmed == 0 || res.Acked != res.Confirmed || res.Received < res.Confirmed || res.Nacked != 0 {
			t.Errorf("confirmed %d, nacked %d, received %d, acked %d", res.Confirmed, res.Nacked, res.Received, res.Acked)
		}
		if len(res.Errors) != 0 {
			t.Errorf("errors %v", res.Errors)
		}
		if res.Backlog != run.backlog || res.Stale != uint64(run.backlog) {
			t.Errorf("backlog %d, stale %d: want the %d old messages published first and drained as stale", res.Backlog, res.Stale, run.backlog)
		}
		if res.Latency.Count != res.Received || res.Latency.P99 <= 0 || res.ConfirmRTT.Count != res.Confirmed {
			t.Errorf("latency %+v, confirm rtt %+v", res.Latency, res.ConfirmRTT)
		}
		if res.ServerCPU <= 0 || !strings.HasPrefix(res.Product, "Sluice") {
			t.Errorf("server cpu %v, product %q", res.ServerCPU, res.Product)
		}
	}
	// The broker recorded the argument: a classic redeclare is refused.
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch.QueueDeclare("bench-quorum", true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	if err == nil || !strings.Contains(err.Error(), "x-queue-type") {
		t.Fatalf("redeclare of the quorum queue as classic: %v, want 406 inequivalent arg 'x-queue-type'", err)
	}
}

// TestAMQPQueueArgFlag: -queue-arg is repeatable, integers become longs,
// and a malformed one is refused.
func TestAMQPQueueArgFlag(t *testing.T) {
	var o bench.AMQPOptions
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.RegisterFlags(fs)
	if err := fs.Parse([]string{"-queue-arg", "x-queue-type=quorum", "-queue-arg", "x-max-length=10", "-queue-arg", "x-note=a=b"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"x-queue-type": "quorum", "x-max-length": int64(10), "x-note": "a=b"}
	if !reflect.DeepEqual(o.QueueArgs, want) {
		t.Fatalf("QueueArgs %#v, want %#v", o.QueueArgs, want)
	}
	if o.Queue != "bench" || o.Producers != 4 {
		t.Fatalf("defaults lost: %+v", o)
	}
	for _, bad := range []string{"x-queue-type", "=quorum"} {
		var o bench.AMQPOptions
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.RegisterFlags(fs)
		if err := fs.Parse([]string{"-queue-arg", bad}); err == nil {
			t.Errorf("-queue-arg %q: want an error", bad)
		}
	}
}

func TestAMQPOptionsValidate(t *testing.T) {
	o := bench.DefaultAMQPOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, bad := range []func(*bench.AMQPOptions){
		func(o *bench.AMQPOptions) { o.URL = "http://x/" },
		func(o *bench.AMQPOptions) { o.Size = bench.AMQPPrefixLen - 1 },
		func(o *bench.AMQPOptions) { o.ConfirmWindow = 0 },
		func(o *bench.AMQPOptions) { o.AckEvery = o.Prefetch + 1 },
		func(o *bench.AMQPOptions) { o.Queue = "" },
		func(o *bench.AMQPOptions) { o.Backlog = -1 },
		func(o *bench.AMQPOptions) { o.Priorities = 256 },
	} {
		o := bench.DefaultAMQPOptions()
		bad(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: want an error", o)
		}
	}
}
