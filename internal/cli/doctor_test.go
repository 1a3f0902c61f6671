package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/advisor"
	"github.com/sluicemq/sluice/internal/dashboard"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// doctorBroker serves the advisor of a real engine; slow is a queue whose
// messages take 3 s against a 1 s visibility timeout.
func doctorBroker(t *testing.T, slow bool) string {
	t.Helper()
	rec := dashboard.NewRecorder(nil)
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	d := dashboard.New(eng, rec, dashboard.Options{})
	srv := httptest.NewServer(d)
	t.Cleanup(func() { srv.Close(); eng.Close() })
	dlq := engine.DefaultQueueConfig()
	dlq.Retention = 14 * 24 * time.Hour
	if _, _, err := eng.CreateQueue("jobs-dlq", dlq, map[string]string{"owner": "team-a"}); err != nil {
		t.Fatal(err)
	}
	cfg := engine.DefaultQueueConfig()
	cfg.Visibility = time.Second
	cfg.DeadLetter = &engine.DeadLetterPolicy{Target: "jobs-dlq", MaxReceiveCount: 5}
	if _, _, err := eng.CreateQueue("jobs", cfg, nil); err != nil {
		t.Fatal(err)
	}
	hold := 100 * time.Millisecond
	if slow {
		hold = 3 * time.Second
	}
	for range 30 {
		rec.Deleted("jobs", hold)
	}
	return srv.URL
}

func doctor(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Doctor(context.Background(), append([]string{"--endpoint", url}, args...), &Env{Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

func TestDoctorRedExitsOne(t *testing.T) {
	url := doctorBroker(t, true)
	code, out, _ := doctor(t, url)
	if code != ExitFail {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "VERDICT") || !strings.HasPrefix(lines[1], "RED") || !strings.Contains(lines[1], "jobs") ||
		!strings.Contains(lines[1], "visibility") || !strings.Contains(lines[1], "duplicate deliveries") {
		t.Fatalf("table:\n%s", out)
	}
	if strings.Contains(out, "GREEN") || !strings.Contains(out, "1 red, ") || !strings.Contains(out, "not checked: prefetch") {
		t.Fatalf("greens shown without --all, or no summary:\n%s", out)
	}
	// The finding names its fix: the attribute and the command.
	if !strings.Contains(lines[2], "fix: set VisibilityTimeout") || !strings.Contains(lines[2], "set-queue-attributes") || !strings.Contains(lines[2], "--queue-name jobs") {
		t.Fatalf("no fix under the red finding:\n%s", out)
	}
	code, out, _ = doctor(t, url, "--all")
	if code != ExitFail || !strings.Contains(out, "GREEN") || !strings.Contains(out, "dlq_owner") {
		t.Fatalf("--all: %d\n%s", code, out)
	}
	code, out, _ = doctor(t, url, "--json")
	var a Advice
	if err := json.Unmarshal([]byte(out), &a); err != nil || code != ExitFail || a.Worst != advisor.Red || len(a.Findings) == 0 {
		t.Fatalf("--json: %d %v %+v", code, err, a)
	}
}

func TestDoctorHealthyExitsZero(t *testing.T) {
	code, out, _ := doctor(t, doctorBroker(t, false))
	if code != ExitOK || strings.Contains(out, "RED") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestDoctorWithoutAdvisor(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	code, _, errOut := doctor(t, srv.URL)
	if code != ExitFail || !strings.Contains(errOut, "does not serve the advisor") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if code, _, _ := doctor(t, srv.URL, "extra"); code != ExitUsage {
		t.Fatalf("extra argument: exit %d", code)
	}
	if code, _, errOut := doctor(t, "http://127.0.0.1:1"); code != ExitFail || !strings.Contains(errOut, "cannot reach Sluice") {
		t.Fatalf("unreachable: %d %s", code, errOut)
	}
}

// TestDoctorFlagsSharedDLQ: two unrelated source queues sharing one DLQ
// are red in `sluice doctor` (and so in the dashboard's advisor data,
// which it reads); sources tagged with one consumer-group are fine
// (DLQ-60).
func TestDoctorFlagsSharedDLQ(t *testing.T) {
	rec := dashboard.NewRecorder(nil)
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	d := dashboard.New(eng, rec, dashboard.Options{})
	srv := httptest.NewServer(d)
	t.Cleanup(func() { srv.Close(); eng.Close() })
	dlq := engine.DefaultQueueConfig()
	dlq.Retention = 14 * 24 * time.Hour
	for _, n := range []string{"shared-dlq", "group-dlq"} {
		if _, _, err := eng.CreateQueue(n, dlq, map[string]string{"owner": "team-a"}); err != nil {
			t.Fatal(err)
		}
	}
	src := func(name, target string, tags map[string]string) {
		cfg := engine.DefaultQueueConfig()
		cfg.DeadLetter = &engine.DeadLetterPolicy{Target: target, MaxReceiveCount: 5}
		if _, _, err := eng.CreateQueue(name, cfg, tags); err != nil {
			t.Fatal(err)
		}
	}
	src("billing", "shared-dlq", nil)
	src("emails", "shared-dlq", nil)
	src("orders-eu", "group-dlq", map[string]string{advisor.GroupTag: "orders"})
	src("orders-us", "group-dlq", map[string]string{advisor.GroupTag: "orders"})

	code, out, _ := doctor(t, srv.URL, "--all")
	if code != ExitFail {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	var shared, grouped string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "dlq_shared") && strings.Contains(l, "shared-dlq") {
			shared = l
		}
		if strings.Contains(l, "dlq_shared") && strings.Contains(l, "group-dlq") {
			grouped = l
		}
	}
	if !strings.HasPrefix(shared, "RED") || !strings.Contains(shared, "billing") || !strings.Contains(shared, "emails") {
		t.Fatalf("shared DLQ not flagged:\n%s", out)
	}
	if !strings.HasPrefix(grouped, "GREEN") {
		t.Fatalf("one consumer group flagged:\n%s", out)
	}
}
