package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/engine"
	sluicesqs "github.com/sluicemq/sluice/internal/sqs"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
	"github.com/sluicemq/sluice/test/crash"
)

// The disk-fault broker. The server binary cannot take a filesystem, so
// the test binary re-executes itself as a broker (TestMain, envChild set)
// built from the same parts as internal/server: pebblestore on a
// pebblestore.FaultFS over the real disk, the engine, and the SQS handler,
// with GET /health answering as internal/server's does (503 once the
// engine has failed). It speaks the crash harness's contract (flags
// --data-dir, --sqs-listen, --ready-file; a ready file), so crash.Start
// runs it, and it adds a control endpoint:
//
//	POST /faults/inject?op=sync|write&err=EIO|ENOSPC   arm a fault on WAL files
//	POST /faults/heal                                  the disk works again
//	GET  /faults/state                                 {"injected":N,"first":unixnano}
//
// Running it as a separate process matters: pebble ends the process
// (Logger.Fatalf, or a panic while it rotates a failed WAL) in some failure
// windows, which is fail-stop but would kill an in-process test.
func runDiskChild(args []string) int {
	// The crash harness's flags; others it passes (listeners this broker
	// does not have) are ignored.
	flags := map[string]string{"--sqs-listen": "127.0.0.1:0"}
	for i := 0; i < len(args); i++ {
		if k, v, ok := strings.Cut(args[i], "="); ok {
			flags[k] = v
		} else if strings.HasPrefix(k, "-") && i+1 < len(args) {
			flags[k] = args[i+1]
			i++
		}
	}
	dataDir, listen, readyFile := ptr(flags["--data-dir"]), ptr(flags["--sqs-listen"]), ptr(flags["--ready-file"])
	if *dataDir == "" || *readyFile == "" {
		fmt.Fprintln(os.Stderr, "faults child: --data-dir and --ready-file are required")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		log.Error("data dir", "err", err)
		return 1
	}
	fs := pebblestore.NewFaultFS(vfs.Default)
	// Only the WAL: a failed MANIFEST sync makes pebble stop the process
	// at once, which teaches nothing the SIGKILL test does not.
	fs.OnlyWAL(true)
	st, err := pebblestore.Open(*dataDir, pebblestore.Options{FS: fs, Logger: log.With("component", "store")})
	if err != nil {
		log.Error("open store", "err", err)
		return 1
	}
	eng, err := engine.Open(engine.Options{Store: st, Logger: log.With("component", "engine")})
	if err != nil {
		log.Error("open engine", "err", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := eng.Failed(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(map[string]string{"status": "failed", "error": err.Error()})
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /faults/inject", func(w http.ResponseWriter, r *http.Request) {
		var e error
		switch r.FormValue("err") {
		case "EIO":
			e = syscall.EIO
		case "ENOSPC":
			e = syscall.ENOSPC
		default:
			http.Error(w, "err must be EIO or ENOSPC", http.StatusBadRequest)
			return
		}
		switch r.FormValue("op") {
		case "sync":
			fs.FailSyncs(e)
		case "write":
			fs.FailWrites(e)
		default:
			http.Error(w, "op must be sync or write", http.StatusBadRequest)
			return
		}
		log.Warn("fault armed", "op", r.FormValue("op"), "err", e)
	})
	mux.HandleFunc("POST /faults/heal", func(http.ResponseWriter, *http.Request) { fs.Heal(); log.Warn("faults healed") })
	mux.HandleFunc("GET /faults/state", func(w http.ResponseWriter, _ *http.Request) {
		var first int64
		if t := fs.FirstInjected(); !t.IsZero() {
			first = t.UnixNano()
		}
		json.NewEncoder(w).Encode(map[string]int64{"injected": fs.Injected(), "first": first})
	})
	mux.Handle("/", sluicesqs.New(eng, sluicesqs.Options{Logger: log.With("component", "sqs")}))
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("listen", "err", err)
		return 1
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	data, _ := json.Marshal(map[string]any{"sqs": ln.Addr().String(), "pid": os.Getpid()})
	tmp := *readyFile + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil || os.Rename(tmp, *readyFile) != nil {
		log.Error("ready file", "err", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	eng.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	if err := st.Close(); err != nil {
		log.Error("close store", "err", err)
	}
	return 0
}

// startChild starts the disk-fault broker on dir.
func startChild(t *testing.T, ctx context.Context, dir string) *crash.Server {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	os.Setenv(envChild, "disk")
	srv, err := crash.Start(ctx, self, dir, 60*time.Second)
	os.Unsetenv(envChild)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func control(t *testing.T, srv *crash.Server, method, path string) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL()+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b.String())
	}
	return []byte(b.String())
}

// health returns /health's status code, or 0 if the broker did not answer.
func health(url string) int {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(url + "/health")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDiskFaults runs the disk-fault broker under the workload and, at a
// random moment, makes the WAL's syncs fail with EIO, or its writes fail
// with EIO or ENOSPC. Then:
//
//   - /health must turn 503 (or the broker must exit: fail-stop either way);
//   - no send whose request began after the first injected error may be
//     acknowledged, and the SQS API must answer with a 5xx;
//   - for ENOSPC, the disk then "gets space back" (the fault is healed) and
//     the test records whether service resumes without a restart (it does
//     not today: see docs/reliability.md, known gaps);
//   - the broker is killed and the real sluice binary restarted on the same
//     directory with a healthy disk; after a drain, nothing acknowledged
//     may be lost (Checker).
func TestDiskFaults(t *testing.T) {
	load := budget(t, 0.20)
	s := seed(t)
	cases := []struct{ name, op, err string }{
		{"sync-EIO", "sync", "EIO"},
		{"write-EIO", "write", "EIO"},
		{"write-ENOSPC", "write", "ENOSPC"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) { runDiskFault(t, c.op, c.err, load/time.Duration(len(cases)), s+uint64(i)) })
	}
}

func runDiskFault(t *testing.T, op, errName string, load time.Duration, s uint64) {
	bin := binary(t)
	rng := rand.New(rand.NewPCG(s, 0xd15c))
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), load+5*time.Minute)
	defer cancel()
	w := newWorkload(false, fmt.Sprintf("%x", s&0xffffff), 5*time.Second)

	srv := startChild(t, ctx, dir)
	if err := w.CreateQueues(ctx, newClient(srv.URL(), 10*time.Second)); err != nil {
		_ = srv.Kill()
		t.Fatal(err)
	}
	inc, err := w.connect(ctx, srv)
	if err != nil {
		_ = srv.Kill()
		t.Fatal(err)
	}
	w.cl.Set(inc)
	defer stopBroker(t, w)
	w.Start(ctx, rng)

	// Load, then the fault at a random moment.
	SleepCtx(ctx, load/2+time.Duration(rng.Int64N(int64(load/2)+1)))
	acksBefore := w.Sends.Load()
	control(t, srv, http.MethodPost, "/faults/inject?op="+op+"&err="+errName)
	w.Ck.Fault()

	// Poll until the broker reports the failure, or exits.
	deadline := time.Now().Add(20 * time.Second)
	exited := false
	for {
		if h := health(srv.URL()); h == http.StatusServiceUnavailable {
			break
		}
		select {
		case <-srv.Exited():
			exited = true
		default:
		}
		if exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/health still not 503 20 s after the fault (acks %d → %d)\n%s", acksBefore, w.Sends.Load(), crash.Tail(dir))
		}
		SleepCtx(ctx, 10*time.Millisecond)
	}
	var first time.Time
	if !exited {
		var st struct{ Injected, First int64 }
		if err := json.Unmarshal(control(t, srv, http.MethodGet, "/faults/state"), &st); err != nil {
			t.Fatal(err)
		}
		first = time.Unix(0, st.First)
		t.Logf("fault %s on %s: %d calls failed; /health 503 %v after the first", errName, op, st.Injected, time.Since(first).Round(time.Millisecond))
	} else {
		t.Logf("fault %s on %s: the broker exited (fail-stop)", errName, op)
	}

	// Keep the producers going a little: every send must now fail.
	failing := w.liveErrs.Load()
	SleepCtx(ctx, 500*time.Millisecond)
	if !exited {
		// The SQS API answers every send with a 5xx.
		client := newClient(srv.URL(), 5*time.Second)
		_, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: ptr(inc.urls[w.Main]), MessageBody: ptr("after the failure")})
		var code string
		if err == nil {
			t.Errorf("SendMessage after the failure was acknowledged")
		} else if code = errorCode(err); code != "InternalFailure" && code != "ServiceUnavailable" {
			t.Errorf("SendMessage after the failure: %v, want InternalFailure or ServiceUnavailable", err)
		}
		t.Logf("a send after the failure: %s (%d client errors while failing)", code, w.liveErrs.Load()-failing)
		if late := w.Ck.AckedAttemptedAfter(first); len(late) > 0 {
			t.Errorf("%d sends begun after the first injected error were acknowledged, e.g. %v", len(late), head(late))
		}
	}
	if errName == "ENOSPC" && !exited {
		control(t, srv, http.MethodPost, "/faults/heal")
		resumed := false
		until := time.Now().Add(3 * time.Second)
		for time.Now().Before(until) && !resumed {
			resumed = health(srv.URL()) == http.StatusOK
			SleepCtx(ctx, 50*time.Millisecond)
		}
		t.Logf("space returned: service resumed without a restart = %v (known gap when false: docs/reliability.md)", resumed)
	}

	// Restart the real binary on a healthy disk and drain.
	old := w.down()
	_ = old.srv.Kill()
	w.crashes++
	srv2, err := crash.Start(ctx, bin, dir, 60*time.Second)
	if err != nil {
		t.Fatalf("restart on a healthy disk: %v", err)
	}
	inc2, err := w.connect(ctx, srv2)
	if err != nil {
		_ = srv2.Kill()
		t.Fatal(err)
	}
	w.cl.Set(inc2)
	w.drain(t, ctx)
	w.verdict(t, fmt.Sprintf("fault %s on %s; acks before the fault %d", errName, op, acksBefore))
}

// errorCode is the SQS error code of an SDK error ("" if none).
func errorCode(err error) string {
	var ae interface{ ErrorCode() string }
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func ptr[T any](v T) *T { return &v }
