package bench_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

	for _, ackEvery := range []int{1, 10} {
		o := bench.DefaultAMQPOptions()
		o.URL, o.Duration, o.Producers, o.Consumers, o.PID = "amqp://guest:guest@"+rf.AMQP+"/", time.Second, 2, 2, srv.PID
		o.Rate, o.AckEvery = 2000, ackEvery
		var out strings.Builder
		res, err := bench.RunAMQP(context.Background(), o, &out)
		t.Logf("ack-every=%d\n%s", ackEvery, out.String())
		if err != nil {
			t.Fatalf("%v\nserver log: %s", err, crash.Tail(dir))
		}
		if res.Confirmed == 0 || res.Acked != res.Confirmed || res.Received < res.Confirmed || res.Nacked != 0 {
			t.Errorf("confirmed %d, nacked %d, received %d, acked %d", res.Confirmed, res.Nacked, res.Received, res.Acked)
		}
		if len(res.Errors) != 0 {
			t.Errorf("errors %v", res.Errors)
		}
		if res.Latency.Count != res.Received || res.Latency.P99 <= 0 || res.ConfirmRTT.Count != res.Confirmed {
			t.Errorf("latency %+v, confirm rtt %+v", res.Latency, res.ConfirmRTT)
		}
		if res.ServerCPU <= 0 || !strings.HasPrefix(res.Product, "Sluice") {
			t.Errorf("server cpu %v, product %q", res.ServerCPU, res.Product)
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
	} {
		o := bench.DefaultAMQPOptions()
		bad(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: want an error", o)
		}
	}
}
