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
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluicemq/sluice/internal/server"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
	"github.com/sluicemq/sluice/test/crash"
)

// The disk-fault broker. The server binary cannot take a filesystem, so
// the test binary re-executes itself as a broker (TestMain, envChild set):
// the real server (internal/server: its store, engine, SQS and AMQP
// front-ends and its own /health) with its store on a
// pebblestore.FaultFS over the real disk (server.Options.StoreFS). It
// speaks the crash harness's contract (flags --data-dir, --sqs-listen,
// --amqp-listen, --ready-file; a ready file), so crash.Start runs it, and
// it serves a control API on a listener of its own, named "control" in
// the ready file:
//
//	POST /faults/inject?op=sync|write&err=EIO|ENOSPC   arm a fault on WAL files
//	POST /faults/heal                                  the disk works again
//	GET  /faults/state                                 {"injected":N,"first":unixnano}
//
// Running it as a separate process matters: pebble ends the process
// (Logger.Fatalf, or a panic while it rotates a failed WAL) in some failure
// windows, which is fail-stop but would kill an in-process test.
func runDiskChild(args []string) int {
	// The crash harness's flags; others it passes are ignored.
	flags := map[string]string{"--sqs-listen": "127.0.0.1:0", "--amqp-listen": "127.0.0.1:0"}
	for i := 0; i < len(args); i++ {
		if k, v, ok := strings.Cut(args[i], "="); ok {
			flags[k] = v
		} else if strings.HasPrefix(k, "-") && i+1 < len(args) {
			flags[k] = args[i+1]
			i++
		}
	}
	dataDir, readyFile := flags["--data-dir"], flags["--ready-file"]
	if dataDir == "" || readyFile == "" {
		fmt.Fprintln(os.Stderr, "faults child: --data-dir and --ready-file are required")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		log.Error("data dir", "err", err)
		return 1
	}
	fs := pebblestore.NewFaultFS(vfs.Default)
	// Only the WAL: a failed MANIFEST sync makes pebble stop the process
	// at once, which teaches nothing the SIGKILL test does not.
	fs.OnlyWAL(true)
	opts := server.DefaultOptions()
	opts.DataDir, opts.StoreFS = dataDir, fs
	opts.SQSListen, opts.AMQPListen = flags["--sqs-listen"], flags["--amqp-listen"]
	mux := http.NewServeMux()
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
		_ = json.NewEncoder(w).Encode(map[string]int64{"injected": fs.Injected(), "first": first})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Error("listen", "err", err)
		return 1
	}
	ctl := &http.Server{Handler: mux}
	go func() { _ = ctl.Serve(ln) }() // ends when the process does
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The server as sluice server runs it: Supervise restarts it in place
	// once space is back after a full disk failed its store, on the same
	// addresses.
	done := make(chan error, 1)
	first := make(chan *server.Server, 1)
	go func() {
		done <- server.Supervise(ctx, opts, log, func(s *server.Server) {
			select {
			case first <- s:
			default:
			}
		})
	}()
	var srv *server.Server
	select {
	case srv = <-first:
	case err := <-done:
		log.Error("start server", "err", err)
		return 1
	}
	// The ready file once the server serves: its /health answers.
	for health("http://"+srv.SQSAddr()) == 0 {
		select {
		case err := <-done:
			log.Error("server stopped before it was ready", "err", err)
			return 1
		case <-time.After(5 * time.Millisecond):
		}
	}
	data, _ := json.Marshal(map[string]any{"sqs": srv.SQSAddr(), "amqp": srv.AMQPAddr(), "control": ln.Addr().String(), "pid": os.Getpid()})
	tmp := readyFile + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil || os.Rename(tmp, readyFile) != nil {
		log.Error("ready file", "err", err)
		return 1
	}
	if err := <-done; err != nil {
		log.Error("server run", "err", err)
		return 1
	}
	return 0
}

// diskChild is a running disk-fault broker and its control API.
type diskChild struct {
	*crash.Server
	control string // base URL of the control API
}

// startChild starts the disk-fault broker on dir.
func startChild(t *testing.T, ctx context.Context, dir string) *diskChild {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := crash.StartEnv(ctx, self, dir, 60*time.Second, []string{envChild + "=disk"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "ready.json"))
	var rf struct{ Control string }
	if err == nil {
		err = json.Unmarshal(b, &rf)
	}
	if err != nil || rf.Control == "" {
		_ = srv.Kill()
		t.Fatalf("the disk-fault broker's ready file %q names no control address: %v", b, err)
	}
	return &diskChild{Server: srv, control: "http://" + rf.Control}
}

func control(t *testing.T, srv *diskChild, method, path string) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, srv.control+path, nil)
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
//   - for ENOSPC, the disk then "gets space back" (the fault is healed):
//     the broker must restart itself in place (server.Supervise) and
//     acknowledge sends again within 60 s, on the same addresses;
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
	inc, err := w.connect(ctx, srv.Server)
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
		// Space returns: the broker restarts itself in place
		// (server.Supervise), on the same addresses, and takes sends
		// again; the workload's producers go on through it, and the
		// verdict below counts what they had acknowledged too. For the
		// checker that is a new incarnation: what the failed store had
		// not synced (a receive's lease, its receive count) is gone, as
		// after a crash. So the workload is held (down) before the heal
		// — the failed broker answers nothing but errors until it
		// restarts — and resumes on a new incarnation once the new
		// broker's /health says ok (the failed one's never does).
		acks := w.Sends.Load()
		old := w.down()
		w.crashes++
		control(t, srv, http.MethodPost, "/faults/heal")
		healed := time.Now()
		wait := func(what string, ok func() bool) {
			for !ok() {
				select {
				case <-srv.Exited():
					t.Fatalf("the broker exited after space returned\n%s", crash.Tail(dir))
				default:
				}
				if time.Since(healed) > 60*time.Second {
					t.Fatalf("%s: not within 60 s of space returning (/health %d, acks %d → %d)\n%s", what, health(srv.URL()), acks, w.Sends.Load(), crash.Tail(dir))
				}
				SleepCtx(ctx, 50*time.Millisecond)
			}
		}
		wait("the broker restarted in place", func() bool { return health(srv.URL()) == http.StatusOK })
		inc2, err := w.connect(ctx, old.srv)
		if err != nil {
			t.Fatal(err)
		}
		w.cl.Set(inc2)
		wait("sends acknowledged again", func() bool { return w.Sends.Load() > acks })
		t.Logf("space returned: service resumed in place %v later; the producers' sends acknowledged again", time.Since(healed).Round(time.Millisecond))
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
