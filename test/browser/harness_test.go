// Package browser drives the dashboard in a real headless Chromium against
// a real Sluice in-process, with SQS traffic from aws-sdk-go-v2, and saves
// the screenshots docs/dashboard.md shows.
//
// Chromium: /usr/bin/chromium (Debian's chromium package), or the path in
// $SLUICE_CHROMIUM. Without it the tests skip, unless
// SLUICE_REQUIRE_BROWSER=1 (CI), which makes a missing browser a failure.
//
// Screenshots go to a temporary directory; with SLUICE_SCREENSHOTS=1 they
// replace docs/img/*.png.
package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/chromedp/chromedp"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/admin"
	"github.com/sluicemq/sluice/internal/alerts"
	"github.com/sluicemq/sluice/internal/dashboard"
	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/metrics"
	sqsapi "github.com/sluicemq/sluice/internal/sqs"
	"github.com/sluicemq/sluice/internal/store/memstore"
)

// broker is a Sluice assembled from the packages `sluice server` wires (the
// engine on the memory store, the SQS and admin APIs) plus the dashboard
// and, optionally, the alerts manager, mounted as the lead mounts them.
//
// It is not server.New because server.New gives the engine no Observer,
// and the dashboard's processing-time percentiles and the alerts' growth
// rule need one. Once the server wires both, this can become server.New.
type broker struct {
	url  string
	eng  *engine.Engine
	sqs  *sqs.Client
	urls map[string]string // queue name → URL
}

func startBroker(t *testing.T, withAlerts bool) *broker {
	t.Helper()
	return startBrokerWith(t, withAlerts, nil)
}

// startBrokerWith is startBroker with extra operator routes (pattern →
// handler), such as a canned AMQP topology.
func startBrokerWith(t *testing.T, withAlerts bool, extra map[string]http.Handler) *broker {
	t.Helper()
	dopts := dashboard.Options{SampleInterval: 500 * time.Millisecond, History: 15 * time.Minute, SparkWindow: 5 * time.Minute}
	ao := alerts.DefaultOptions()
	ao.Interval = 250 * time.Millisecond
	rec, arrivals := dashboard.NewRecorder(nil), alerts.NewArrivals(ao, nil)
	eng, err := engine.Open(engine.Options{Store: memstore.New(), Observer: metrics.Multi(rec, arrivals)})
	if err != nil {
		t.Fatal(err)
	}
	var am *alerts.Manager
	if withAlerts {
		am = alerts.New(eng, arrivals, ao, nil, nil)
		dopts.Alerts = am
	}
	dash := dashboard.New(eng, rec, dopts)
	mux := http.NewServeMux()
	mux.Handle(api.Prefix, admin.New(eng, admin.Options{}))
	mux.Handle("/ui/", dash)
	mux.Handle("/sluice/v1/dashboard/", dash)
	mux.Handle("/sluice/v1/advisor", dash)
	for pattern, h := range extra {
		mux.Handle(pattern, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if am != nil {
		mux.Handle("/sluice/v1/alerts", am)
		wg.Go(func() { am.Run(ctx) })
	}
	sqsH := sqsapi.New(eng, sqsapi.Options{})
	mux.Handle("/", sqsH)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			sqsH.ServeHTTP(w, r) // an SQS query-protocol GET
			return
		}
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	wg.Go(func() { dash.Run(ctx) })
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		cancel() // ends the event streams first, so Close does not wait on them
		wg.Wait()
		srv.Close()
		eng.Close()
	})
	b := &broker{url: srv.URL, eng: eng, urls: map[string]string{}}
	b.sqs = sqs.New(sqs.Options{
		BaseEndpoint: aws.String(srv.URL),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
	})
	return b
}

func (b *broker) createQueue(t *testing.T, name string, attrs map[string]string, tags map[string]string) {
	t.Helper()
	out, err := b.sqs.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs, Tags: tags})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	b.urls[name] = *out.QueueUrl
}

func (b *broker) send(ctx context.Context, queue string, bodies []string, group string) error {
	for len(bodies) > 0 {
		k := min(len(bodies), 10)
		var entries []types.SendMessageBatchRequestEntry
		for i, body := range bodies[:k] {
			e := types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(body),
				MessageAttributes: map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")}}}
			if group != "" {
				e.MessageGroupId = aws.String(group)
			}
			entries = append(entries, e)
		}
		out, err := b.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(b.urls[queue]), Entries: entries})
		if err != nil {
			return err
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("send to %s: %s", queue, aws.ToString(out.Failed[0].Message))
		}
		bodies = bodies[k:]
	}
	return nil
}

// depth is every message of the queue, whatever its state.
func (b *broker) depth(t *testing.T, queue string) int {
	t.Helper()
	info, err := b.eng.GetQueue(queue)
	if err != nil {
		t.Fatal(err)
	}
	return info.Visible + info.InFlight + info.Delayed
}

// worker consumes a queue like a real service would: it processes each
// message for hold and deletes it, except poison messages while the bug is
// not fixed, which it reports as terminal failures with their context
// through POST /sluice/v1/failures.
type worker struct {
	b     *broker
	queue string
	hold  time.Duration
	batch int32
	fixed *atomic.Bool
}

func (w *worker) run(ctx context.Context, t *testing.T) {
	for ctx.Err() == nil {
		out, err := w.b.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.b.urls[w.queue]),
			MaxNumberOfMessages: w.batch, WaitTimeSeconds: 1})
		if err != nil {
			if ctx.Err() == nil {
				t.Logf("worker %s: %v", w.queue, err)
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		var done []types.DeleteMessageBatchRequestEntry
		for i, m := range out.Messages {
			if strings.HasPrefix(aws.ToString(m.Body), "poison") && !w.fixed.Load() {
				w.fail(ctx, t, aws.ToString(m.ReceiptHandle))
				continue
			}
			done = append(done, types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle})
		}
		if len(done) == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.hold):
		}
		if _, err := w.b.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(w.b.urls[w.queue]), Entries: done}); err != nil && ctx.Err() == nil {
			t.Logf("worker %s: delete: %v", w.queue, err)
		}
	}
}

func (w *worker) fail(ctx context.Context, t *testing.T, handle string) {
	body, _ := json.Marshal(api.FailureReport{
		QueueURL: w.b.urls[w.queue], ReceiptHandle: handle,
		ErrorClass: "SchemaError", ErrorMessage: "order v3: field 'customer_id' is missing",
		Trace:      "Traceback (most recent call last):\n  File \"worker.py\", line 42, in handle\n    customer = order[\"customer_id\"]\nKeyError: 'customer_id'",
		ConsumerID: "orders-worker-7", ConsumerVersion: "v2.3.1", Terminal: true,
	})
	req, _ := http.NewRequestWithContext(ctx, "POST", w.b.url+"/sluice/v1/failures", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			t.Logf("failure report: %v", err)
		}
		return
	}
	resp.Body.Close()
	if resp.StatusCode != 200 && ctx.Err() == nil {
		t.Logf("failure report: HTTP %d", resp.StatusCode)
	}
}

// browser starts a headless Chromium with a fresh profile and returns its
// context and the console messages collected so far.
type console struct {
	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

func (c *console) errors(allowNetwork bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.msgs {
		if m.Type != chromedp.ConsoleError && !m.IsException() {
			continue
		}
		if allowNetwork && m.Source == "network" {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%s:%d)", m.String(), m.URL, m.Line))
	}
	return out
}

func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("SLUICE_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		if p, err := exec.LookPath("chromium"); err == nil {
			return p
		}
		if os.Getenv("SLUICE_REQUIRE_BROWSER") == "1" {
			t.Fatalf("chromium not found at %s (SLUICE_REQUIRE_BROWSER=1)", path)
		}
		t.Skipf("chromium not found at %s; install Debian's chromium or set SLUICE_CHROMIUM (SLUICE_REQUIRE_BROWSER=1 makes this a failure)", path)
	}
	return path
}

func newBrowser(t *testing.T) (context.Context, *console) {
	t.Helper()
	exe := chromium(t)
	dir := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// Start the browser now, so that the console is watched from the
	// first page on.
	if err := chromedp.Do(ctx, viewport(1280, 800)); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	c := &console{}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
		}
	}()
	return ctx, c
}

func viewport(w, h int64) chromedp.Action[chromedp.Void] {
	return chromedp.EmulateViewport(w, h)
}

// shotDir is where screenshots go: docs/img with SLUICE_SCREENSHOTS=1,
// else a temporary directory.
func shotDir(t *testing.T) string {
	if os.Getenv("SLUICE_SCREENSHOTS") == "1" {
		dir, err := filepath.Abs("../../docs/img")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	// Let the last update paint.
	do(t, ctx, "settle", chromedp.Sleep(300*time.Millisecond))
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", filepath.Join(dir, name))
}

// waitJS waits until the JavaScript expression is truthy.
func waitJS(t *testing.T, ctx context.Context, what, expr string, timeout time.Duration) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('main') ? document.querySelector('main').innerText.slice(0, 3000) : ''`))
		t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, text)
	}
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {innerText: ''}).innerText`, sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}
