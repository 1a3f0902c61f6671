//go:build linux

// Package soak runs the real sluice binary for a bounded time under a load
// shaped like production: a deep backlog spread over many queues, thousands
// of parked long polls, steady SQS producers and consumers, and AMQP
// consumers with prefetch fed by a publisher using confirms. It samples the
// broker's memory, CPU and disk every 10 s, drains everything, and watches
// whether the store gives the disk space back.
//
// It is slow and writes gigabytes, so it runs only when asked:
//
//	SLUICE_SOAK=1 SLUICE_SOAK_DURATION=10m go test -count=1 -v -timeout 90m ./test/soak/
//
// Settings (environment):
//
//	SLUICE_SOAK=1            run at all (otherwise the test skips)
//	SLUICE_SOAK_DURATION     steady-load phase, default 10m
//	SLUICE_SOAK_MESSAGES     backlog to fill before it, default 2000000
//	SLUICE_SOAK_POLLERS      parked long polls, default 2000
//	SLUICE_SOAK_RATE         steady SQS sends (and receives) per second on the backlog, default 1000
//	SLUICE_SOAK_SETTLE       longest wait for the disk to stop shrinking after the drain, default 3m
//	SLUICE_SOAK_TRICKLE      SQS sends per second on the hot queues, whose long polls take them,
//	                         from the drain's start to the end of that wait, default 0 (none):
//	                         producers that never quite stop while consumers drain a backlog
//	SLUICE_SOAK_DIR          where the data directory goes; default the repository's parent.
//	                         Must be a real disk, not tmpfs.
//	SLUICE_BIN               a prebuilt sluice binary instead of building ./cmd/sluice
//	SLUICE_SOAK_PROFILES     a directory: the broker's heap profile at the end of the steady
//	                         load is saved there (go tool pprof -top FILE); default none
//
// Only correctness is asserted — no acknowledged message is lost, nothing
// is delivered that was not sent or after its delete was acknowledged, no
// 5xx, the broker never dies. Figures are logged, never asserted.
package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/test/crash"
)

const (
	backlogQueues   = 20
	hotQueues       = 5   // no backlog; a trickle producer; long polls wake on it
	idleQueues      = 180 // nothing ever sent; long polls stay parked
	amqpQueues      = 3
	amqpConsumers   = 50
	amqpConns       = 5
	amqpPrefetch    = 20
	amqpRate        = 300 // msg/s published with confirms, all AMQP queues together
	hotRate         = 200 // msg/s over the hot queues
	fillProducers   = 32
	steadyWorkers   = 8 // producers, and as many consumers, on the backlog queues
	drainWorkers    = 24
	batch           = 10
	visibility      = 60 // s, every SQS queue's VisibilityTimeout
	sampleEvery     = 10 * time.Second
	quietWindow     = 30 * time.Second // CPU measurement windows
	stableFor       = 60 * time.Second // the disk "stopped shrinking" when no new low for this long
	restartSettle   = 2 * time.Minute
	churnMessages   = 100_000
	shutdownTimeout = 2 * time.Minute
)

type config struct {
	duration time.Duration
	messages int
	pollers  int
	rate     int
	trickle  int // msg/s during the drain and the settle after it
	settle   time.Duration
	dir      string
	profiles string // SLUICE_SOAK_PROFILES
}

func loadConfig(t *testing.T) config {
	if os.Getenv("SLUICE_SOAK") != "1" {
		t.Skip("set SLUICE_SOAK=1 to run the soak test (minutes; writes gigabytes)")
	}
	c := config{duration: 10 * time.Minute, messages: 2_000_000, pollers: 2000, rate: 1000, settle: 3 * time.Minute}
	dur := func(name string, p *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				t.Fatalf("%s=%q: want a duration", name, v)
			}
			*p = d
		}
	}
	num := func(name string, p *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
			if err != nil || n < 0 {
				t.Fatalf("%s=%q: want a non-negative integer", name, v)
			}
			*p = n
		}
	}
	dur("SLUICE_SOAK_DURATION", &c.duration)
	dur("SLUICE_SOAK_SETTLE", &c.settle)
	num("SLUICE_SOAK_MESSAGES", &c.messages)
	num("SLUICE_SOAK_POLLERS", &c.pollers)
	num("SLUICE_SOAK_RATE", &c.rate)
	num("SLUICE_SOAK_TRICKLE", &c.trickle)
	c.dir = os.Getenv("SLUICE_SOAK_DIR")
	c.profiles = os.Getenv("SLUICE_SOAK_PROFILES")
	if c.dir == "" {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			t.Fatalf("go env GOMOD: %v", err)
		}
		c.dir = filepath.Dir(filepath.Dir(strings.TrimSpace(string(out))))
	}
	return c
}

// soak is one run's shared state.
type soak struct {
	t    *testing.T
	cfg  config
	dir  string // holds data/, server.log, ready.json
	bin  string
	errs *errorLog
	c    *sqsClient

	srvMu    sync.Mutex
	srv      *crash.Server
	stopping *atomic.Bool // set before we stop srv ourselves
	amqpURL  string
	died     atomic.Bool
	abort    context.CancelFunc

	queues                     []*tracked
	backlog, hot, idle, amqpQs []*tracked

	t0    time.Time
	phase atomic.Pointer[string]

	sent, received, deleted, empty atomic.Uint64 // SQS
	published, nacked, delivered   atomic.Uint64 // AMQP
	parked                         atomic.Int64

	sampleMu sync.Mutex
	samples  []sample
}

type sample struct {
	at                    time.Duration
	phase                 string
	rss                   int64
	mem                   goMem
	cpu                   float64 // server CPU, % of one core, over the interval
	send, recv, del       float64 // SQS msg/s
	pub, dlv              float64 // AMQP msg/s
	visible, inflight     int64
	disk, apparent        int64
	parked, waiting       int64 // long polls parked: as the client counts them, as the broker does
	load                  string
	machineCPU, clientCPU float64
}

func (s *soak) setPhase(p string) {
	s.phase.Store(&p)
	s.t.Logf("%7.0fs ===== phase %s (load %s)", time.Since(s.t0).Seconds(), p, loadAvg())
}

func (s *soak) server() *crash.Server {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	return s.srv
}

// start runs the broker and watches it: an exit we did not ask for fails
// the test and cancels the run.
func (s *soak) start(ctx context.Context) time.Duration {
	t0 := time.Now()
	// Every client of the run dials from 127.0.0.1, and the parked long
	// polls alone reach the default per-IP cap on HTTP connections
	// (2,000): at the cap the broker closes the longest-idle connection of
	// that address, so the producers', consumers' and sampler's
	// connections were reset and the steady rates collapsed. The soak
	// measures load, not that cap (internal/server tests it): lift it for
	// the run.
	conf := filepath.Join(s.dir, "soak.toml")
	limit := fmt.Sprintf("max_http_connections_per_ip = %d\n", s.cfg.pollers+1000)
	if err := os.WriteFile(conf, []byte(limit), 0o644); err != nil {
		s.t.Fatalf("config: %v", err)
	}
	srv, err := crash.Start(ctx, s.bin, s.dir, 10*time.Minute, "-config", conf, "-debug-listen", "127.0.0.1:0")
	if err != nil {
		s.t.Fatalf("start server: %v", err)
	}
	took := time.Since(t0)
	b, err := os.ReadFile(filepath.Join(s.dir, "ready.json"))
	if err != nil {
		s.t.Fatalf("ready file: %v", err)
	}
	var rf struct{ AMQP string }
	if err := json.Unmarshal(b, &rf); err != nil || rf.AMQP == "" {
		s.t.Fatalf("ready file %s: no amqp address (%v)", b, err)
	}
	stopping := new(atomic.Bool)
	s.srvMu.Lock()
	s.srv, s.stopping = srv, stopping
	s.amqpURL = "amqp://guest:guest@" + rf.AMQP + "/"
	s.srvMu.Unlock()
	if s.c != nil {
		s.c.setEndpoint(srv.URL())
	}
	go func() {
		<-srv.Exited()
		if !stopping.Load() {
			s.died.Store(true)
			s.t.Errorf("the server (pid %d) died: %s", srv.PID, crash.Tail(s.dir))
			s.abort()
		}
	}()
	return took
}

// stop ends the broker with SIGTERM and returns how long it took.
func (s *soak) stop() time.Duration {
	s.srvMu.Lock()
	srv := s.srv
	s.stopping.Store(true)
	s.srvMu.Unlock()
	t0 := time.Now()
	if err := srv.Stop(shutdownTimeout); err != nil {
		s.t.Errorf("stop server: %v", err)
	}
	return time.Since(t0)
}

// snapshot is the broker's footprint at one moment.
type snapshot struct {
	rss, disk, apparent int64
	heap, heapGoal      int64 // Go heap allocated, and the next GC's goal (≈ 2 × live)
	cpu                 time.Duration
}

func (s *soak) snap() snapshot {
	pid := s.server().PID
	var sn snapshot
	var err error
	if sn.rss, err = procRSS(pid); err != nil {
		s.t.Logf("rss: %v", err)
	}
	if sn.cpu, err = procCPU(pid); err != nil {
		s.t.Logf("cpu: %v", err)
	}
	if sn.disk, sn.apparent, err = diskUsage(filepath.Join(s.dir, "data")); err != nil {
		s.t.Logf("disk: %v", err)
	}
	if s.c != nil {
		m, err := s.c.goMemory(context.Background())
		if err != nil {
			s.t.Logf("heap: %v", err)
		}
		sn.heap, sn.heapGoal = m.heap, m.goal
	}
	return sn
}

func TestSoak(t *testing.T) {
	cfg := loadConfig(t)
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fsName, tmp, err := fsType(cfg.dir)
	if err != nil {
		t.Fatalf("statfs %s: %v", cfg.dir, err)
	}
	if tmp {
		t.Fatalf("%s is on %s: the soak must write to a real disk (set SLUICE_SOAK_DIR)", cfg.dir, fsName)
	}
	dir, err := os.MkdirTemp(cfg.dir, "sluice-soak-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log tail:\n%s", crash.Tail(dir))
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	if d, ok := t.Deadline(); ok && time.Until(d) < cfg.duration+30*time.Minute {
		t.Logf("warning: the test deadline is %v away; fill, drain and settle may need 30 min beyond SLUICE_SOAK_DURATION=%v (use -timeout)", time.Until(d).Round(time.Second), cfg.duration)
	}

	bin := os.Getenv("SLUICE_BIN")
	if bin == "" {
		if bin, err = crash.Build(dir); err != nil {
			t.Fatal(err)
		}
	}
	errs := newErrorLog()
	s := &soak{t: t, cfg: cfg, dir: dir, bin: bin, errs: errs, t0: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.abort = cancel
	s.start(ctx)
	t.Cleanup(func() {
		s.srvMu.Lock()
		srv := s.srv
		s.stopping.Store(true)
		s.srvMu.Unlock()
		_ = srv.Kill()
	})
	s.c = newSQSClient(s.server().URL(), cfg.pollers+fillProducers+drainWorkers+64, errs)
	t.Logf("soak: dir %s (%s), duration %v, backlog %d messages over %d queues, %d long polls, steady %d msg/s, load %s, %d CPUs",
		dir, fsName, cfg.duration, cfg.messages, backlogQueues, cfg.pollers, cfg.rate, loadAvg(), runtime.NumCPU())

	s.createQueues(ctx)
	base := s.snap()
	t.Logf("baseline: %d queues, rss %s, heap %s (goal %s), disk %s (apparent %s) | %s", len(s.queues), mib(base.rss), mib(base.heap), mib(base.heapGoal),
		mib(base.disk), mib(base.apparent), diskFiles(filepath.Join(dir, "data")))

	sampleCtx, stopSampler := context.WithCancel(ctx)
	var samplerDone sync.WaitGroup
	samplerDone.Add(1)
	go func() { defer samplerDone.Done(); s.sampler(sampleCtx) }()

	// Phase 1: the backlog.
	s.setPhase("fill")
	fillStart := time.Now()
	s.fill(ctx)
	fillTook := time.Since(fillStart)
	var backlogAcked uint64
	for _, q := range s.backlog {
		backlogAcked += q.nAcked
	}
	t.Logf("fill: %d of %d messages acknowledged in %v (%.0f msg/s)", backlogAcked, cfg.messages, fillTook.Round(time.Second),
		float64(backlogAcked)/fillTook.Seconds())

	// Broker idle with the full backlog, then with every long poll parked.
	s.setPhase("idle")
	idleCPU, _ := s.cpuWindow(ctx, quietWindow)
	full := s.snap()
	fullDepth := s.totalDepth(ctx)
	t.Logf("full backlog: %d queued, rss %s, heap %s (goal %s), disk %s (apparent %s) | %s", fullDepth, mib(full.rss), mib(full.heap), mib(full.heapGoal),
		mib(full.disk), mib(full.apparent), diskFiles(filepath.Join(dir, "data")))

	s.setPhase("parked")
	consumers, stopConsumers := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	s.startPollers(consumers, &cwg)
	parkedAt := s.waitParked(ctx, int64(cfg.pollers), 2*time.Minute)
	empty0 := s.empty.Load()
	parkedCPU, clientCPU := s.cpuWindow(ctx, quietWindow)
	parkedEmpty := s.empty.Load() - empty0

	// Phase 2: steady load.
	s.setPhase("steady")
	producers, stopProducers := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	s.startSteady(producers, consumers, &pwg, &cwg)
	amqpStop := s.startAMQP(producers, consumers, &pwg, &cwg)
	select {
	case <-time.After(cfg.duration):
	case <-ctx.Done():
	}
	steadyEnd := s.snap()
	s.saveHeapProfile("steady")

	// Phase 3: drain (under the trickle, if any).
	s.setPhase("drain")
	stopProducers()
	pwg.Wait()
	stopTrickle := s.startTrickle(ctx)
	drainStart := time.Now()
	drainCtx, stopDrain := context.WithCancel(ctx)
	var dwg sync.WaitGroup
	s.startDrain(drainCtx, &dwg)
	drained := s.waitDrained(ctx, s.drainLimit())
	drainTook := time.Since(drainStart)
	stopDrain()
	dwg.Wait()
	// quiesce ends the trickle, lets the long polls take what it sent,
	// and stops every consumer.
	quiesce := func() {
		stopTrickle()
		if s.cfg.trickle > 0 && !s.waitDrained(ctx, 2*time.Minute) {
			s.t.Logf("the trickle's last messages were not all delivered within 2 min")
		}
		stopConsumers()
		cwg.Wait()
		amqpStop()
	}
	if s.cfg.trickle == 0 {
		quiesce()
	}
	stopSampler()
	samplerDone.Wait()
	afterDrain := s.snap()

	// Phase 4: does the disk space come back?
	rec := s.reclaim(ctx, base, full, quiesce)

	s.report(reportInput{
		base: base, full: full, fullDepth: fullDepth, steadyEnd: steadyEnd, afterDrain: afterDrain,
		fillTook: fillTook, backlogAcked: backlogAcked,
		idleCPU: idleCPU, parkedCPU: parkedCPU, parkedClientCPU: clientCPU, parkedAt: parkedAt, parkedEmpty: parkedEmpty,
		drained: drained, drainTook: drainTook, rec: rec,
	})
	s.stop()
}

func (s *soak) createQueues(ctx context.Context) {
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(visibility)}
	add := func(kind, name string) *tracked {
		q := &tracked{idx: len(s.queues), name: name, kind: kind}
		s.queues = append(s.queues, q)
		return q
	}
	for i := range backlogQueues {
		s.backlog = append(s.backlog, add("backlog", fmt.Sprintf("soak-backlog-%02d", i)))
	}
	for i := range hotQueues {
		s.hot = append(s.hot, add("hot", fmt.Sprintf("soak-hot-%d", i)))
	}
	for i := range idleQueues {
		s.idle = append(s.idle, add("idle", fmt.Sprintf("soak-idle-%03d", i)))
	}
	for i := range amqpQueues {
		s.amqpQs = append(s.amqpQs, add("amqp", fmt.Sprintf("soak-amqp-%d", i)))
	}
	for _, q := range s.queues {
		if q.kind == "amqp" {
			continue // declared over AMQP
		}
		url, err := s.c.createQueue(ctx, q.name, attrs)
		if err != nil {
			s.t.Fatal(err)
		}
		q.url = url
	}
}

// refreshURLs looks the queue URLs up again after a restart (the listener's
// port changed).
func (s *soak) refreshURLs(ctx context.Context) {
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(visibility)}
	for _, q := range s.queues {
		if q.url == "" {
			continue
		}
		url, err := s.c.createQueue(ctx, q.name, attrs)
		if err != nil {
			s.t.Fatal(err)
		}
		q.url = url
	}
}

// sendTo sends n new messages to q in one batch and records which were
// acknowledged.
func (s *soak) sendTo(ctx context.Context, q *tracked, n int, buf []byte) []byte {
	first := q.reserve(n)
	bodies := make([][]byte, n)
	buf = buf[:0]
	for i := range n {
		start := len(buf)
		buf = appendBody(buf, q.idx, first+uint64(i))
		bodies[i] = buf[start:len(buf):len(buf)]
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	ok, err := s.c.sendBatch(rctx, q.url, bodies)
	cancel()
	if err != nil {
		return buf
	}
	seqs := make([]uint64, len(ok))
	for i, j := range ok {
		seqs[i] = first + uint64(j)
	}
	q.ack(seqs)
	s.sent.Add(uint64(len(ok)))
	return buf
}

func (s *soak) fill(ctx context.Context) {
	total := (s.cfg.messages + batch - 1) / batch
	var next atomic.Int64
	var wg sync.WaitGroup
	for range fillProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, batch*maxBody)
			for ctx.Err() == nil {
				b := int(next.Add(1) - 1)
				if b >= total {
					return
				}
				n := min(batch, s.cfg.messages-b*batch)
				buf = s.sendTo(ctx, s.backlog[b%backlogQueues], n, buf)
			}
		}()
	}
	wg.Wait()
}

// consume receives from q once and deletes what it got. A delete is
// "certain" when it was acknowledged before the lease could have ended;
// a later delivery of that message would break the guarantee that
// acknowledged deletes stay deleted.
func (s *soak) consume(ctx context.Context, q *tracked, wait int, parked *atomic.Int64) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Duration(wait)*time.Second+time.Minute)
	start := time.Now()
	msgs, err := s.c.receive(rctx, q.url, batch, wait, parked)
	cancel()
	if err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		s.empty.Add(1)
		return 0, nil
	}
	s.received.Add(uint64(len(msgs)))
	handles := make([]string, len(msgs))
	seqs := make([]uint64, len(msgs))
	valid := make([]bool, len(msgs))
	for i, m := range msgs {
		handles[i] = m.ReceiptHandle
		seqs[i], valid[i] = q.deliver([]byte(m.Body))
	}
	// Deletes finish even when the phase is over, so nothing received
	// stays leased.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	ok, err := s.c.deleteBatch(dctx, q.url, handles)
	cancel()
	if err != nil {
		return len(msgs), nil
	}
	s.deleted.Add(uint64(len(ok)))
	if time.Since(start) < (visibility-5)*time.Second {
		var certain []uint64
		for _, i := range ok {
			if valid[i] {
				certain = append(certain, seqs[i])
			}
		}
		q.markDeleted(certain)
	}
	return len(msgs), nil
}

// pause waits d or until ctx ends; it paces retries after an error.
func pause(ctx context.Context, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// startPollers starts the long polls: a tenth on the hot queues, the rest
// on idle queues, WaitTimeSeconds=20, each deleting what it receives.
func (s *soak) startPollers(ctx context.Context, wg *sync.WaitGroup) {
	nHot := s.cfg.pollers / 10
	for i := range s.cfg.pollers {
		q := s.idle[i%len(s.idle)]
		if i < nHot {
			q = s.hot[i%len(s.hot)]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := s.consume(ctx, q, 20, &s.parked); err != nil && ctx.Err() == nil {
					pause(ctx, time.Second)
				}
			}
		}()
	}
}

// cpuWindow measures the server's and this process's CPU over d, in % of
// one core.
func (s *soak) cpuWindow(ctx context.Context, d time.Duration) (server, client float64) {
	pid := s.server().PID
	c0, _ := procCPU(pid)
	m0, _ := procCPU(os.Getpid())
	t0 := time.Now()
	pause(ctx, d)
	c1, _ := procCPU(pid)
	m1, _ := procCPU(os.Getpid())
	el := time.Since(t0).Seconds()
	server = 100 * (c1 - c0).Seconds() / el
	client = 100 * (m1 - m0).Seconds() / el
	s.t.Logf("cpu over %.1fs: server %.1f%%, test process %.1f%% of a core (load %s)", el, server, client, loadAvg())
	return server, client
}

// startSteady starts rate-limited producers and consumers on the backlog
// queues, and a trickle producer on the hot queues whose long polls pick
// it up.
func (s *soak) startSteady(producers, consumers context.Context, pwg, cwg *sync.WaitGroup) {
	every := func(rate, workers int) time.Duration {
		return time.Duration(float64(time.Second) * float64(batch*workers) / float64(rate))
	}
	if s.cfg.rate > 0 {
		iv := every(s.cfg.rate, steadyWorkers)
		for range steadyWorkers {
			pwg.Add(1)
			go func() {
				defer pwg.Done()
				buf := make([]byte, 0, batch*maxBody)
				tick := time.NewTicker(iv)
				defer tick.Stop()
				for {
					select {
					case <-producers.Done():
						return
					case <-tick.C:
					}
					buf = s.sendTo(producers, s.backlog[rand.IntN(len(s.backlog))], batch, buf)
				}
			}()
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				tick := time.NewTicker(iv)
				defer tick.Stop()
				// These stop when the drain starts: its workers take over.
				for {
					select {
					case <-producers.Done():
						return
					case <-tick.C:
					}
					_, _ = s.consume(consumers, s.backlog[rand.IntN(len(s.backlog))], 1, nil)
				}
			}()
		}
	}
	pwg.Go(func() { s.sendRound(producers, s.hot, batch, every(hotRate, 1)) })
}

// sendRound sends n messages every interval, round qs, until ctx ends.
func (s *soak) sendRound(ctx context.Context, qs []*tracked, n int, interval time.Duration) {
	buf := make([]byte, 0, n*maxBody)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		buf = s.sendTo(ctx, qs[i%len(qs)], n, buf)
	}
}

// startTrickle sends cfg.trickle messages a second, one at a time, round
// the hot queues (whose long polls take them) until the returned func is
// called; it returns when the sender has stopped. No trickle: a no-op.
func (s *soak) startTrickle(ctx context.Context) func() {
	if s.cfg.trickle <= 0 {
		return func() {}
	}
	tctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.sendRound(tctx, s.hot, 1, time.Second/time.Duration(s.cfg.trickle)) })
	return func() { cancel(); wg.Wait() }
}

// startAMQP declares the AMQP queues, starts amqpConsumers consumers
// (prefetch amqpPrefetch, one channel each, over amqpConns connections) and
// one publisher per queue in confirm mode. The returned func closes the
// connections once both contexts have ended and the goroutines are done.
func (s *soak) startAMQP(producers, consumers context.Context, pwg, cwg *sync.WaitGroup) func() {
	s.srvMu.Lock()
	url := s.amqpURL
	s.srvMu.Unlock()
	var conns []*amqp.Connection
	dial := func() *amqp.Connection {
		c, err := amqp.Dial(url)
		if err != nil {
			s.t.Fatalf("amqp dial: %v", err)
		}
		conns = append(conns, c)
		return c
	}
	channel := func(c *amqp.Connection) *amqp.Channel {
		ch, err := c.Channel()
		if err != nil {
			s.t.Fatalf("amqp channel: %v", err)
		}
		return ch
	}
	pub := dial()
	for _, q := range s.amqpQs {
		ch := channel(pub)
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, nil); err != nil {
			s.t.Fatalf("declare %s: %v", q.name, err)
		}
		if err := ch.Confirm(false); err != nil {
			s.t.Fatalf("confirm.select: %v", err)
		}
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			s.publish(producers, ch, q)
		}()
	}
	var cc []*amqp.Connection
	for range amqpConns {
		cc = append(cc, dial())
	}
	for i := range amqpConsumers {
		q := s.amqpQs[i%len(s.amqpQs)]
		ch := channel(cc[i%len(cc)])
		if err := ch.Qos(amqpPrefetch, 0, false); err != nil {
			s.t.Fatalf("qos: %v", err)
		}
		dl, err := ch.ConsumeWithContext(consumers, q.name, fmt.Sprintf("soak-%d", i), false, false, false, false, nil)
		if err != nil {
			s.t.Fatalf("consume %s: %v", q.name, err)
		}
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for d := range dl {
				s.delivered.Add(1)
				q.deliver(d.Body)
				if err := d.Ack(false); err != nil {
					s.errs.add("amqp:ack", err)
				}
			}
		}()
	}
	return func() {
		for _, c := range conns {
			if err := c.Close(); err != nil {
				s.errs.add("amqp:close", err)
			}
		}
	}
}

// publish sends bursts of batch messages with confirms on ch at this
// queue's share of amqpRate, waiting for each burst's confirms.
func (s *soak) publish(ctx context.Context, ch *amqp.Channel, q *tracked) {
	iv := time.Duration(float64(time.Second) * float64(batch*amqpQueues) / amqpRate)
	tick := time.NewTicker(iv)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		first := q.reserve(batch)
		dcs := make([]*amqp.DeferredConfirmation, 0, batch)
		for i := range batch {
			body := appendBody(nil, q.idx, first+uint64(i))
			dc, err := ch.PublishWithDeferredConfirmWithContext(context.WithoutCancel(ctx), "", q.name, false, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "text/plain", Body: body})
			if err != nil {
				s.errs.add("amqp:publish", err)
				return
			}
			dcs = append(dcs, dc)
		}
		var acked []uint64
		for i, dc := range dcs {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			ok, err := dc.WaitContext(wctx)
			cancel()
			switch {
			case err != nil:
				s.errs.add("amqp:confirm", err)
			case !ok:
				s.nacked.Add(1)
				s.errs.add("amqp:nack", fmt.Errorf("publish %d nacked", first+uint64(i)))
			default:
				acked = append(acked, first+uint64(i))
			}
		}
		q.ack(acked)
		s.published.Add(uint64(len(acked)))
	}
}

// startDrain starts workers that empty the backlog queues as fast as the
// broker lets them; the hot queues' long polls and the AMQP consumers
// empty theirs.
func (s *soak) startDrain(ctx context.Context, wg *sync.WaitGroup) {
	for i := range drainWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := i % len(s.backlog)
			for ctx.Err() == nil {
				n, err := s.consume(ctx, s.backlog[k], 1, nil)
				if err != nil && ctx.Err() == nil {
					pause(ctx, time.Second)
				}
				if n == 0 {
					k = (k + 1) % len(s.backlog)
				}
			}
		}()
	}
}

func (s *soak) drainLimit() time.Duration {
	limit := 30 * time.Minute
	if d, ok := s.t.Deadline(); ok {
		limit = min(limit, time.Until(d)-10*time.Minute)
	}
	return max(limit, time.Minute)
}

// waitDrained polls until every acknowledged message has been delivered and
// the broker counts no message in any queue.
func (s *soak) waitDrained(ctx context.Context, limit time.Duration) bool {
	t0 := time.Now()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		missing := uint64(0)
		for _, q := range s.queues {
			n, _ := q.lost()
			missing += n
		}
		depth := s.totalDepth(ctx)
		if missing == 0 && depth == 0 {
			return true
		}
		if time.Since(t0) > limit {
			s.t.Logf("drain gave up after %v: %d acknowledged messages not delivered, %d messages in the broker", limit, missing, depth)
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// totalDepth is visible+inflight+delayed over the soak's queues, or -1.
func (s *soak) totalDepth(ctx context.Context) int64 {
	d, err := s.c.depths(ctx)
	if err != nil {
		s.t.Logf("admin queues: %v", err)
		return -1
	}
	var n int64
	for _, q := range s.queues {
		x := d[q.name]
		n += x.Visible + x.Inflight + x.Delayed
	}
	return n
}

// sampler logs a line every sampleEvery until ctx ends.
func (s *soak) sampler(ctx context.Context) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	type counters struct {
		at                             time.Time
		cpu, self, mach                time.Duration
		sent, recv, del, pub, delivers uint64
	}
	read := func() counters {
		c := counters{at: time.Now(), sent: s.sent.Load(), recv: s.received.Load(), del: s.deleted.Load(),
			pub: s.published.Load(), delivers: s.delivered.Load()}
		c.cpu, _ = procCPU(s.server().PID)
		c.self, _ = procCPU(os.Getpid())
		c.mach = machineBusy()
		return c
	}
	prev := read()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cur := read()
		el := cur.at.Sub(prev.at).Seconds()
		rate := func(a, b uint64) float64 { return float64(b-a) / el }
		sm := sample{
			at:         time.Since(s.t0),
			phase:      *s.phase.Load(),
			cpu:        100 * (cur.cpu - prev.cpu).Seconds() / el,
			clientCPU:  100 * (cur.self - prev.self).Seconds() / el,
			machineCPU: 100 * (cur.mach - prev.mach).Seconds() / el,
			send:       rate(prev.sent, cur.sent),
			recv:       rate(prev.recv, cur.recv),
			del:        rate(prev.del, cur.del),
			pub:        rate(prev.pub, cur.pub),
			dlv:        rate(prev.delivers, cur.delivers),
			parked:     s.parked.Load(),
			load:       loadAvg(),
		}
		prev = cur
		sm.rss, _ = procRSS(s.server().PID)
		sm.mem, _ = s.c.goMemory(ctx)
		sm.disk, sm.apparent, _ = diskUsage(filepath.Join(s.dir, "data"))
		if d, err := s.c.depths(ctx); err == nil {
			for _, q := range s.queues {
				sm.visible += d[q.name].Visible
				sm.inflight += d[q.name].Inflight
			}
			sm.waiting = waitingIn(d)
		} else {
			sm.visible, sm.inflight, sm.waiting = -1, -1, -1
		}
		s.sampleMu.Lock()
		s.samples = append(s.samples, sm)
		s.sampleMu.Unlock()
		s.t.Logf("%7.0fs %-6s rss %9s (heap %s, goal %s, stacks %s) cpu %5.1f%% | sqs send %6.0f recv %6.0f del %6.0f /s | amqp pub %4.0f dlv %4.0f /s | queued %8d inflight %5d | parked %4d (broker %4d) | disk %10s (apparent %10s) | machine %5.1f%% test %5.1f%% | load %s",
			sm.at.Seconds(), sm.phase, mib(sm.rss), mib(sm.mem.heap), mib(sm.mem.goal), mib(sm.mem.stack), sm.cpu, sm.send, sm.recv, sm.del, sm.pub, sm.dlv,
			sm.visible, sm.inflight, sm.parked, sm.waiting, mib(sm.disk), mib(sm.apparent), sm.machineCPU, sm.clientCPU, sm.load)
	}
}

// machineBusy is the busy time of all CPUs since boot (/proc/stat: user,
// nice, system, irq, softirq, steal).
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var ticks int64
	for i, v := range f {
		if i == 0 || i == 4 || i == 5 || i > 8 { // name, idle, iowait, guest
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
