package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/brokertest/poll"
	"github.com/sluicemq/sluice/internal/buildinfo"
	"github.com/sluicemq/sluice/internal/testlog"
)

// The build named in Options reaches the startup log and sluice_build_info;
// the log line names the dashboard URL, no data directory for the memory
// store, and a last "sluice stopped" line follows a clean shutdown.
func TestStartupLogAndBuildInfo(t *testing.T) {
	o := DefaultOptions()
	o.Store = "memory"
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", ""
	o.Build = buildinfo.Info{Version: "v9.8.7", Commit: "0123456789abcdef", Date: "2026-11-24T15:00:00Z", GoVersion: "go1.26.0"}
	var logs testlog.Buffer
	s, err := New(o, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	resp, err := http.Get("http://" + s.SQSAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `sluice_build_info{commit="0123456789abcdef",date="2026-11-24T15:00:00Z",go_version="go1.26.0",version="v9.8.7"} 1`
	if !strings.Contains(string(body), want) {
		t.Fatalf("/metrics lacks %s", want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	started := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `msg="sluice started"`) {
			started = l
		}
	}
	for _, w := range []string{"version=v9.8.7", "commit=0123456789ab", "dashboard=http://" + s.SQSAddr() + "/ui/", "store=memory"} {
		if !strings.Contains(started, w) {
			t.Errorf("started line %q lacks %q", started, w)
		}
	}
	if strings.Contains(started, "data_dir") {
		t.Errorf("memory store logs a data dir: %q", started)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `msg="sluice stopped"`) {
		t.Errorf("last log line %q, want sluice stopped", last)
	}
}

// GET /ready is 503 until Run serves, 200 while it does, and names its
// checks; /health stays as it was.
func TestReady(t *testing.T) {
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", "127.0.0.1:0"
	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/ready", nil)
		req.Host = "127.0.0.1" // httptest's example.com is not an allowed host (#11)
		s.httpSrv.Handler.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, body := get(); code != 503 || !strings.Contains(body, `"listeners":"not serving"`) {
		t.Fatalf("before Run: %d %s", code, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	poll.CheckFor(t, 10*time.Second, func() error {
		resp, err := http.Get("http://" + s.SQSAddr() + "/ready")
		if err != nil {
			return fmt.Errorf("never ready: %w", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("never ready: %d %s", resp.StatusCode, body)
		}
		if !strings.Contains(string(body), `"status":"ready"`) || !strings.Contains(string(body), `"recovery":"done"`) {
			t.Fatalf("ready body %s", body)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if code, _ := get(); code != 503 {
		t.Fatalf("after shutdown: %d", code)
	}
}
