//go:build linux

// Package perf holds slow measurements that CI does not run: they write
// gigabytes to the real disk. Run them with
//
//	SLUICE_PERF=1 go test -run TestRestart -v -timeout 30m ./test/perf/
//
// (or `make perf`, which also runs TestDeepBacklog: see backlog_test.go).
//
// SLUICE_PERF_DIR puts the data directory somewhere else than the
// repository's parent directory (keep it on a real disk, not tmpfs), and
// SLUICE_PERF_PROFILE=path writes a CPU profile of the restart (store open
// plus engine open) to path.
package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/server"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

const (
	envPerf    = "SLUICE_PERF"
	envDir     = "SLUICE_PERF_DIR"
	envProfile = "SLUICE_PERF_PROFILE"

	// The restart is measured in a child process (this test binary run
	// again with TestRestartChild), so that its RSS and heap are those of
	// a broker that has just started, not of the process that wrote the
	// data.
	envChildDir  = "SLUICE_PERF_CHILD_DIR"
	envChildWant = "SLUICE_PERF_CHILD_WANT"
	resultPrefix = "PERF-RESULT "

	queueName  = "perf"
	bodySize   = 1024
	batchSize  = 10
	producers  = 64
	readyLimit = 5 * time.Second
)

// TestRestart1M measures how long a broker holding 1,000,000 messages of
// 1 KiB takes to be ready to serve after a restart.
func TestRestart1M(t *testing.T) {
	skipUnlessPerf(t)
	runRestart(t, 1_000_000, 0)
}

// TestRestartTombstones measures a restart with 100,000 messages sent, of
// which half were received and deleted, leaving their deletes as
// tombstones in the store for the start-up scan to step over.
func TestRestartTombstones(t *testing.T) {
	skipUnlessPerf(t)
	runRestart(t, 100_000, 50_000)
}

func skipUnlessPerf(t *testing.T) {
	if os.Getenv(envPerf) != "1" {
		t.Skipf("set %s=1 to run (writes up to ~2 GB to disk)", envPerf)
	}
}

// result is what the child reports.
type result struct {
	StoreOpen   time.Duration // pebblestore.Open (WAL replay)
	EngineOpen  time.Duration // engine.Open (the recovery scan)
	Ready       time.Duration // StoreOpen + EngineOpen: when it can serve
	FirstRecv   time.Duration // from start to the first Receive returning a message
	Visible     int
	RSS         int64 // bytes, VmRSS after engine.Open
	HeapAlloc   uint64
	HeapLive    uint64 // HeapAlloc after a GC
	Goroutines  int
	ProfilePath string `json:",omitempty"`
}

func runRestart(t *testing.T, sent, deleted int) {
	dir := dataDir(t)
	fill(t, dir, sent, deleted)
	du, files := diskUsage(t, dir)
	t.Logf("data dir %s: %d files, %.1f MiB apparent, %.1f MiB allocated", dir, files, mib(du.apparent), mib(du.allocated))

	want := sent - deleted
	for _, pass := range []struct {
		name  string
		evict bool
	}{
		{"cold (data dir evicted from the page cache)", true},
		{"warm (second restart)", false},
	} {
		if pass.evict {
			evictPageCache(t, dir)
		}
		r := runChild(t, dir, want)
		t.Logf("%s: ready in %v (store open %v, engine open %v), first receive at %v; visible %d; RSS %.1f MiB, heap %.1f MiB (live %.1f MiB)",
			pass.name, r.Ready.Round(time.Millisecond), r.StoreOpen.Round(time.Millisecond), r.EngineOpen.Round(time.Millisecond),
			r.FirstRecv.Round(time.Millisecond), r.Visible, mib(r.RSS), mib(int64(r.HeapAlloc)), mib(int64(r.HeapLive)))
		if r.ProfilePath != "" {
			t.Logf("CPU profile of the restart: %s", r.ProfilePath)
		}
		if r.Visible != want {
			t.Errorf("%s: %d visible messages after restart, want %d", pass.name, r.Visible, want)
		}
		// A target, reported, never asserted: tests do not fail on timing.
		verdict := "meets"
		if r.Ready > readyLimit {
			verdict = "MISSES"
		}
		t.Logf("%s: %s the %v target", pass.name, verdict, readyLimit)
	}
	du, files = diskUsage(t, dir)
	t.Logf("data dir after the restarts: %d files, %.1f MiB apparent, %.1f MiB allocated", files, mib(du.apparent), mib(du.allocated))
}

// dataDir returns a new directory on the real disk: under $SLUICE_PERF_DIR,
// or next to the repository (not in /tmp, which may be tmpfs).
func dataDir(t *testing.T) string {
	parent := os.Getenv(envDir)
	if parent == "" {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			t.Fatal("cannot locate the repository")
		}
		// file is <repo>/test/perf/restart_test.go.
		parent = filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(file))))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(parent, &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		t.Fatalf("%s is on tmpfs; set %s to a directory on a real disk", parent, envDir)
	}
	dir, err := os.MkdirTemp(parent, "sluice-perf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// fill writes sent messages from producers goroutines, then receives and
// deletes deleted of them, and closes everything cleanly.
func fill(t *testing.T, dir string, sent, deleted int) {
	st, err := pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(engine.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.CreateQueue(queueName, engine.DefaultQueueConfig(), nil); err != nil {
		t.Fatal(err)
	}

	// Bodies are slices of one random pool, so they do not compress away.
	pool := make([]byte, 1<<20+bodySize)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	start := time.Now()
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		sendErr error
	)
	batches := int64((sent + batchSize - 1) / batchSize)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]engine.Message, batchSize)
			for {
				b := next.Add(1) - 1
				if b >= batches {
					return
				}
				n := min(batchSize, sent-int(b)*batchSize)
				for i := range n {
					off := (int(b)*batchSize + i + p) * 4099 % (1 << 20)
					msgs[i] = engine.Message{Body: pool[off : off+bodySize]}
				}
				res, err := e.Send(queueName, msgs[:n])
				if err == nil {
					for _, r := range res {
						if r.Err != nil {
							err = r.Err
							break
						}
					}
				}
				if err != nil {
					errOnce.Do(func() { sendErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if sendErr != nil {
		t.Fatalf("Send: %v", sendErr)
	}
	elapsed := time.Since(start)
	t.Logf("sent %d messages of %d B in %v (%.0f msg/s, %d producers, batches of %d)",
		sent, bodySize, elapsed.Round(time.Millisecond), float64(sent)/elapsed.Seconds(), producers, batchSize)

	if deleted > 0 {
		start = time.Now()
		var left atomic.Int64
		left.Store(int64(deleted))
		var cwg sync.WaitGroup
		errc := make(chan error, 8)
		for range 8 {
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				for {
					n := min(int64(batchSize), left.Add(-batchSize)+batchSize)
					if n <= 0 {
						return
					}
					d, err := e.Receive(context.Background(), queueName, engine.ReceiveRequest{Max: int(n), WaitSet: true})
					if err != nil {
						errc <- err
						return
					}
					if int64(len(d)) < n {
						left.Add(n - int64(len(d)))
					}
					handles := make([]string, len(d))
					for i := range d {
						handles[i] = d[i].ReceiptHandle
					}
					res, err := e.Delete(queueName, handles)
					if err == nil {
						for _, r := range res {
							if r != nil {
								err = r
								break
							}
						}
					}
					if err != nil {
						errc <- err
						return
					}
				}
			}()
		}
		cwg.Wait()
		close(errc)
		for err := range errc {
			t.Fatalf("receive/delete: %v", err)
		}
		t.Logf("received and deleted %d messages in %v", deleted, time.Since(start).Round(time.Millisecond))
	}

	info, err := e.GetQueue(queueName)
	if err != nil {
		t.Fatal(err)
	}
	if info.Visible != sent-deleted {
		t.Fatalf("before restart: %d visible, want %d", info.Visible, sent-deleted)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// runChild measures a restart of the store in dir in a fresh process.
func runChild(t *testing.T, dir string, want int) result {
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestartChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envChildDir+"="+dir, envChildWant+"="+strconv.Itoa(want))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), resultPrefix); ok {
			var r result
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				t.Fatalf("child result %q: %v", rest, err)
			}
			return r
		}
	}
	t.Fatalf("child printed no result:\n%s", out)
	return result{}
}

// TestRestartChild is the child side of runChild; it skips unless run by
// it.
func TestRestartChild(t *testing.T) {
	dir := os.Getenv(envChildDir)
	if dir == "" {
		t.Skip("run by TestRestart*")
	}
	want, _ := strconv.Atoi(os.Getenv(envChildWant))
	var r result
	if path := os.Getenv(envProfile); path != "" {
		path = fmt.Sprintf("%s.%d", path, time.Now().UnixNano())
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		r.ProfilePath = path
	}

	// Open exactly as `sluice server` does (store, engine, listener), so
	// the figure is the time until the broker can serve.
	start := time.Now()
	o := server.DefaultOptions()
	o.DataDir = dir
	o.SQSListen = "127.0.0.1:0"
	o.AMQPListen = "127.0.0.1:0"
	srv, err := server.New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	e := srv.Engine()
	r.Ready = time.Since(start)
	r.EngineOpen = r.Ready
	if r.ProfilePath != "" {
		pprof.StopCPUProfile()
	}

	d, err := e.Receive(context.Background(), queueName, engine.ReceiveRequest{Max: 1, WaitSet: true})
	if err != nil {
		t.Fatal(err)
	}
	r.FirstRecv = time.Since(start)
	if want > 0 && len(d) != 1 {
		t.Fatalf("first Receive returned %d messages", len(d))
	}

	info, err := e.GetQueue(queueName)
	if err != nil {
		t.Fatal(err)
	}
	// The message just received is in flight; it counts as loaded.
	r.Visible = info.Visible + info.InFlight
	r.RSS = vmRSS(t)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapAlloc = ms.HeapAlloc
	runtime.GC()
	runtime.ReadMemStats(&ms)
	r.HeapLive = ms.HeapAlloc
	r.Goroutines = runtime.NumGoroutine()

	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s%s\n", resultPrefix, b)
}

// vmRSS returns the process's resident set size from /proc/self/status.
func vmRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Logf("reading RSS: %v", err)
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "123456 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	t.Logf("no VmRSS in /proc/self/status")
	return 0
}

type usage struct{ apparent, allocated int64 }

// diskUsage sums the sizes of the files under dir.
func diskUsage(t *testing.T, dir string) (usage, int) {
	var u usage
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n++
		u.apparent += fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			u.allocated += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return u, n
}

// evictPageCache asks the kernel to drop the cached pages of the files in
// dir (they are clean: the store was closed), so that the next open reads
// from the disk. It touches only these files, not the machine's whole
// cache.
func evictPageCache(t *testing.T, dir string) {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
	if err != nil {
		t.Logf("evicting the page cache: %v (the cold figures are warm)", err)
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
