// Package crash runs the real sluice binary, kills it with SIGKILL under
// load, restarts it on the same data directory, and checks what clients were
// told against what the broker delivers afterwards (crash_test.go).
//
// The harness in this file is also used by other packages' tests that need a
// real broker process (internal/bench).
//
// Server contract relied on (cmd/sluice):
//
//	sluice server --data-dir DIR --sqs-listen 127.0.0.1:0 --ready-file FILE
//
// writes FILE atomically once listening, holding {"sqs":"127.0.0.1:PORT","pid":N};
// GET http://ADDR/health answers 200 when ready.
package crash

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// EnvBinary names the sluice binary the tests run; Main builds one into it
// unless it is already set.
const EnvBinary = "SLUICE_BIN"

// Main is the body of a TestMain that runs the real broker: unless -short
// or SLUICE_BIN is set, it builds the server once into a temporary
// directory (named with prefix), hands its path to the tests through
// SLUICE_BIN, runs m and removes the directory. It returns the exit code.
// tags are Build's.
func Main(m *testing.M, prefix string, tags ...string) int {
	flag.Parse()
	if testing.Short() || os.Getenv(EnvBinary) != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() // a temp dir left behind changes no result
	bin, err := Build(dir, tags...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = os.Setenv(EnvBinary, bin) // cannot fail for a valid name
	return m.Run()
}

// Binary returns the path in SLUICE_BIN, failing t when Main has not set
// it; in -short mode, where Main builds nothing, it skips t instead.
func Binary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(EnvBinary)
	if bin == "" && testing.Short() {
		t.Skipf("-short: the server binary is not built (set %s to run this test)", EnvBinary)
	}
	if bin == "" {
		t.Fatalf("%s not set: TestMain did not build the server", EnvBinary)
	}
	return bin
}

// NewClient is an SDK client of the endpoint url with one attempt per call
// (an SDK retry would blur which sends were acknowledged), idle idle
// connections per host, the given request timeout, and key as both access
// key and secret. Request bodies reach net/http as private in-memory
// copies (ownBodies): without them about one receive in a few hundred
// whose answer is larger than 4 KiB failed on a healthy broker.
func NewClient(url, key string, idle int, timeout time.Duration) *sqs.Client {
	return dialClient(url, key, idle, timeout, (&net.Dialer{Timeout: 2 * time.Second}).DialContext)
}

// dialClient is NewClient dialling with dial (tests wrap the connections).
func dialClient(url, key string, idle int, timeout time.Duration, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *sqs.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         dial,
		MaxIdleConnsPerHost: idle,
		IdleConnTimeout:     30 * time.Second,
	}
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: key, SecretAccessKey: key}, nil
		}),
		RetryMaxAttempts: 1,
		Retryer:          aws.NopRetryer{},
		HTTPClient:       ownBodies{&http.Client{Transport: tr, Timeout: timeout}},
	})
}

// ownBodies hands net/http a private in-memory copy of each request body.
//
// Why: smithy-go closes the request body it gave http.Client.Do as soon as
// Do returns, that is once the response headers are in, while net/http's
// writeLoop may still be finishing the request: after copying
// Content-Length bytes it copies the body once more to io.Discard to check
// for extra bytes (transferWriter.writeBody). The SDK's body is a
// WriterTo that answers io.EOF once closed, io.Copy passes that error on,
// and the Transport, taking it for a failed request write, closes the
// connection under the response still being read. Whatever the client's
// 4 KiB read buffer already held is read; the rest fails with "use of
// closed network connection" (the SDK reports "deserialization failed").
// A broker that answers quickly makes the window likelier; the broker
// sends every byte (see TestClientSurvivesEarlyAnswer). With a copy of its
// own, net/http's body is never closed under it. The same race is
// aws/aws-sdk-go-v2#1825 and #2737; the SDK's answer there is to retry
// net.ErrClosed, which these clients (one attempt per call) cannot use.
type ownBodies struct{ c *http.Client }

func (o ownBodies) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		body, err := io.ReadAll(req.Body)
		_ = req.Body.Close() // the SDK's own body: closing it only drops its reference
		if err != nil {
			return nil, err
		}
		// No GetBody, as before: net/http replays nothing on its own.
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	return o.c.Do(req)
}

// CloseIdleConnections closes the client's idle connections (after a
// kill, so the next request dials the restarted server).
func (o ownBodies) CloseIdleConnections() { o.c.CloseIdleConnections() }

// CloseIdle closes the idle connections of a client made by NewClient.
func CloseIdle(c *sqs.Client) {
	if ci, ok := c.Options().HTTPClient.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// GetJSON decodes the JSON answer of GET url into v, failing on any
// status but 200.
func GetJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// GetText returns the body of a GET of url, which must answer 200 (a
// node's /metrics, say).
func GetText(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), nil
}

// ShardOf asks the node at endpoint ("http://host:port"), with a bare
// JSON-protocol GetQueueAttributes, which cluster shard serves the queue
// at queueURL: the X-Sluice-Shard and X-Sluice-Node headers of the
// answer, which the leader of the queue's shard stamps (cluster.HeaderShard
// and HeaderNode; named here, not imported, so that internal/cluster's
// own tests can use this package).
func ShardOf(ctx context.Context, endpoint, queueURL string) (shard int, leader uint64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/",
		strings.NewReader(fmt.Sprintf(`{"QueueUrl":%q,"AttributeNames":["QueueArn"]}`, queueURL)))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS.GetQueueAttributes")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_ = resp.Body.Close() // the headers are the answer
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GetQueueAttributes %s: %s", queueURL, resp.Status)
	}
	shard, err = strconv.Atoi(resp.Header.Get("X-Sluice-Shard"))
	if err != nil {
		return 0, 0, fmt.Errorf("X-Sluice-Shard = %q", resp.Header.Get("X-Sluice-Shard"))
	}
	leader, err = strconv.ParseUint(resp.Header.Get("X-Sluice-Node"), 10, 64)
	return shard, leader, err
}

// Build compiles ./cmd/sluice of the enclosing module into dir, with the
// build tags given (the cluster fault harness builds with faultclock), and
// returns the binary's path.
func Build(dir string, tags ...string) (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("crash: go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	bin := filepath.Join(dir, "sluice")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "./cmd/sluice")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("crash: go build ./cmd/sluice: %w\n%s", err, out)
	}
	return bin, nil
}

// Server is one running broker process. Restart it on the same directory
// with Start again after Kill.
type Server struct {
	Addr string // host:port of the SQS listener
	AMQP string // host:port of the AMQP listener ("" when it has none)
	// Debug is host:port of the debug listener ("" without
	// --debug-listen).
	Debug string
	PID   int

	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has been waited for
	err    error         // the Wait result, valid after exited is closed
}

// URL is the SQS endpoint, http://Addr.
func (s *Server) URL() string { return "http://" + s.Addr }

// AMQPURL is the AMQP endpoint with the default guest credentials.
func (s *Server) AMQPURL() string { return "amqp://guest:guest@" + s.AMQP + "/" }

// Exited is closed when the process has ended.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Start runs bin as a server on dir/data, appending its output to
// dir/server.log, and returns once the ready file names its address and
// /health answers 200 (or fails after timeout). extra flags are appended.
func Start(ctx context.Context, bin, dir string, timeout time.Duration, extra ...string) (*Server, error) {
	return StartEnv(ctx, bin, dir, timeout, nil, extra...)
}

// StartEnv is Start with env (KEY=value entries) added to the process's
// environment, which is otherwise this process's.
func StartEnv(ctx context.Context, bin, dir string, timeout time.Duration, env []string, extra ...string) (*Server, error) {
	ready := filepath.Join(dir, "ready.json")
	if err := os.Remove(ready); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := append([]string{"server",
		"--data-dir", filepath.Join(dir, "data"),
		"--sqs-listen", "127.0.0.1:0",
		"--amqp-listen", "127.0.0.1:0",
		"--ready-file", ready,
	}, extra...)
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		_ = logf.Close() // the start error is the one to report
		return nil, fmt.Errorf("crash: start %s: %w", bin, err)
	}
	s := &Server{PID: cmd.Process.Pid, cmd: cmd, exited: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		_ = logf.Close() // the process's exit status is what is reported
		close(s.exited)
	}()

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(err error) (*Server, error) {
		_ = s.Kill()
		return nil, fmt.Errorf("crash: server in %s not ready: %w (log: %s)", dir, err, tail(filepath.Join(dir, "server.log")))
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for s.Addr == "" {
		b, err := os.ReadFile(ready)
		if err == nil {
			var rf struct {
				SQS   string `json:"sqs"`
				AMQP  string `json:"amqp"`
				Debug string `json:"debug"`
				PID   int    `json:"pid"`
			}
			if err := json.Unmarshal(b, &rf); err != nil || rf.SQS == "" {
				return fail(fmt.Errorf("ready file %q: %v", b, err))
			}
			if rf.PID != 0 && rf.PID != s.PID {
				return fail(fmt.Errorf("ready file names pid %d, started %d", rf.PID, s.PID))
			}
			s.Addr, s.AMQP, s.Debug = rf.SQS, rf.AMQP, rf.Debug
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fail(err)
		}
		select {
		case <-s.exited:
			return fail(fmt.Errorf("exited: %v", s.err))
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-tick.C:
		}
	}
	hc := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/health", nil)
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close() // only the status is read
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.exited:
			return fail(fmt.Errorf("exited: %v", s.err))
		case <-ctx.Done():
			return fail(fmt.Errorf("/health: %v (last error %v)", ctx.Err(), err))
		case <-tick.C:
		}
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (s *Server) Kill() error {
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-s.exited
	return nil
}

// Stop asks the server to shut down (SIGTERM) and waits up to timeout for it
// to exit, then kills it. It returns the process's exit error when it did
// not exit cleanly in time.
func (s *Server) Stop(timeout time.Duration) error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.exited:
		return nil
	case <-t.C:
		_ = s.Kill()
		return fmt.Errorf("crash: server pid %d did not exit within %v of SIGTERM", s.PID, timeout)
	}
}

// tail returns the last lines of a log file, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// Tail is the end of dir/server.log.
func Tail(dir string) string { return tail(filepath.Join(dir, "server.log")) }

// Mortal is one incarnation of a server that a test kills and restarts.
type Mortal interface {
	comparable
	// Dead is closed just before the process is killed.
	Dead() <-chan struct{}
}

// Lives hands client workers the current incarnation of a server that is
// killed and restarted, and makes them wait while it is down. The zero
// value is not usable; call NewLives.
type Lives[T Mortal] struct {
	mu      sync.Mutex
	cur     T             // the zero value while down
	changed chan struct{} // closed when cur changes
}

// NewLives returns Lives with no incarnation yet.
func NewLives[T Mortal]() *Lives[T] { return &Lives[T]{changed: make(chan struct{})} }

// Current returns the current incarnation, waiting while there is none.
func (l *Lives[T]) Current(ctx context.Context) (T, error) {
	var zero T
	for {
		l.mu.Lock()
		cur, changed := l.cur, l.changed
		l.mu.Unlock()
		if cur != zero {
			return cur, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
}

// Get returns the current incarnation, or the zero value while down.
func (l *Lives[T]) Get() T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// Set installs a new incarnation (the zero value: down) and wakes waiters.
func (l *Lives[T]) Set(inc T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur = inc
	close(l.changed)
	l.changed = make(chan struct{})
}

// AfterError waits before a worker retries: for the next incarnation when
// inc is dead, else a short pause.
func (l *Lives[T]) AfterError(ctx context.Context, inc T) {
	select {
	case <-inc.Dead():
		_, _ = l.Current(ctx)
		return
	default:
	}
	t := time.NewTimer(20 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-inc.Dead():
	case <-ctx.Done():
	}
}
