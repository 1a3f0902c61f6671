package browser

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestOperatorJourney is the incident an operator handles from the
// dashboard: traffic flows; a bad deploy makes a poison wave; the DLQ meter
// and an alert light up; the operator inspects a dead letter's context,
// dry-runs a redrive, starts one before the fix (the safety stop pauses
// it), fixes the consumer, resumes, redrives the rest and watches the DLQ
// drain. Then the queue page and the advisor. No console error is allowed
// anywhere.
func TestOperatorJourney(t *testing.T) {
	if testing.Short() {
		t.Skip("browser journey: about a minute")
	}
	ctx, cons := newBrowser(t)
	b := startBroker(t, true)
	shots := shotDir(t)

	b.createQueue(t, "orders-dlq", map[string]string{"MessageRetentionPeriod": "1209600"}, nil)
	b.createQueue(t, "orders", map[string]string{"VisibilityTimeout": "30",
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:orders-dlq","maxReceiveCount":"5"}`}, nil)
	b.createQueue(t, "emails", nil, nil)
	b.createQueue(t, "thumbnails-dlq", nil, map[string]string{"owner": "media"})
	b.createQueue(t, "thumbnails", map[string]string{"VisibilityTimeout": "1",
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:thumbnails-dlq","maxReceiveCount":"20"}`}, nil)
	b.createQueue(t, "invoices.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}, nil)

	// Traffic: producers and workers until the test ends.
	tctx, stopTraffic := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stopTraffic(); wg.Wait() })
	fixed := new(atomic.Bool)
	for _, w := range []*worker{
		{b: b, queue: "orders", hold: 40 * time.Millisecond, batch: 5, fixed: fixed},
		{b: b, queue: "orders", hold: 90 * time.Millisecond, batch: 5, fixed: fixed},
		{b: b, queue: "emails", hold: 20 * time.Millisecond, batch: 10, fixed: fixed},
		// Thumbnails take 1.2 s against a 1 s visibility timeout.
		{b: b, queue: "thumbnails", hold: 1200 * time.Millisecond, batch: 10, fixed: fixed},
	} {
		wg.Go(func() { w.run(tctx, t) })
	}
	produce := func(queue string, every time.Duration, n int) {
		wg.Go(func() {
			for i := 0; tctx.Err() == nil; i++ {
				bodies := make([]string, n)
				for j := range bodies {
					bodies[j] = fmt.Sprintf(`{"%s": %d}`, strings.TrimSuffix(queue, "s"), i*n+j)
				}
				if err := b.send(tctx, queue, bodies, ""); err != nil && tctx.Err() == nil {
					t.Logf("produce %s: %v", queue, err)
				}
				select {
				case <-tctx.Done():
				case <-time.After(every):
				}
			}
		})
	}
	produce("orders", 250*time.Millisecond, 3)
	produce("emails", 500*time.Millisecond, 2)
	produce("thumbnails", time.Second, 10)
	invoices := make([]string, 30)
	for i := range invoices {
		invoices[i] = fmt.Sprintf(`{"invoice": %d}`, i)
	}
	if err := b.send(tctx, "invoices.fifo", invoices, "all-customers"); err != nil {
		t.Fatal(err)
	}

	// 1. The overview loads (GET / redirects to /ui/), shows every queue
	// and goes live over the event stream.
	do(t, ctx, "open the dashboard", chromedp.Navigate(b.url+"/"))
	waitJS(t, ctx, "the queues", `document.querySelectorAll('#queues-table tbody tr').length === 6`, 10*time.Second)
	waitJS(t, ctx, "the live stream", `document.getElementById('live').dataset.mode === 'live'`, 10*time.Second)
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); !strings.HasSuffix(loc, "/ui/") {
		t.Fatalf("GET / led to %s", loc)
	}
	waitJS(t, ctx, "the no-alert line", `document.querySelector('.alerts .ok-line') !== null`, 10*time.Second)
	time.Sleep(4 * time.Second) // some history for the sparklines

	// 2. A poison wave: a deploy breaks the order schema.
	poison := make([]string, 60)
	for i := range poison {
		poison[i] = fmt.Sprintf(`poison {"order": %d, "schema": "v3"}`, 9000+i)
	}
	if err := b.send(tctx, "orders", poison, ""); err != nil {
		t.Fatal(err)
	}
	dlqCell := `document.querySelector('tr[data-queue="orders-dlq"] .m-dlq')`
	waitJS(t, ctx, "the DLQ meter at 60", dlqCell+`.querySelector('.val').textContent === '60'`, 20*time.Second)
	waitJS(t, ctx, "the warning colour", dlqCell+`.classList.contains('level-warn')`, 5*time.Second)
	// The source queue's row shows its DLQ too.
	waitJS(t, ctx, "orders' DLQ cell", `document.querySelector('tr[data-queue="orders"] .m-dlq .val').textContent === '60'`, 5*time.Second)
	waitJS(t, ctx, "the firing alerts", `(document.getElementById('firing-alerts') || {innerText: ''}).innerText.includes('dlq_growth') && document.getElementById('firing-alerts').innerText.includes('dlq_depth')`, 15*time.Second)
	if s := text(t, ctx, "#firing-alerts"); !strings.Contains(s, "orders-dlq") {
		t.Fatalf("firing alerts: %q", s)
	}
	time.Sleep(1500 * time.Millisecond)
	screenshot(t, ctx, shots, "overview.png")
	do(t, ctx, "phone width", viewport(390, 844))
	waitJS(t, ctx, "the phone layout", `getComputedStyle(document.querySelector('#queues-table thead')).position === 'absolute'`, 5*time.Second)
	screenshot(t, ctx, shots, "overview-phone.png")
	do(t, ctx, "desktop width", viewport(1280, 800))

	// 3. Triage: open the DLQ page from the overview and inspect a dead
	// letter's failure context, with the keyboard.
	do(t, ctx, "open the DLQ page", chromedp.Click(chromedp.CSS(`tr[data-queue="orders-dlq"] a.triage`)))
	waitJS(t, ctx, "the dead letters", `document.querySelectorAll('#messages tbody tr[data-id]').length === 50`, 10*time.Second)
	waitJS(t, ctx, "more to load", `!document.getElementById('load-more').hidden`, 5*time.Second)
	do(t, ctx, "load the rest", chromedp.Click(chromedp.CSS("#load-more")))
	waitJS(t, ctx, "all 60", `document.querySelectorAll('#messages tbody tr[data-id]').length === 60`, 10*time.Second)
	if s := text(t, ctx, "#messages tbody"); !strings.Contains(s, "SchemaError") || !strings.Contains(s, "v2.3.1") || !strings.Contains(s, "orders") {
		t.Fatalf("rows lack the failure context: %q", s[:min(len(s), 500)])
	}
	do(t, ctx, "focus the first Inspect button", chromedp.Focus(chromedp.CSS(`#messages tbody tr[data-id] button`)))
	do(t, ctx, "press Enter", chromedp.KeyEvent(kb.Enter))
	waitJS(t, ctx, "the message dialog", `document.getElementById('message-dialog').open`, 5*time.Second)
	detail := text(t, ctx, "#message-dialog")
	for _, want := range []string{"SchemaError", "customer_id", "worker.py", "orders-worker-7", "v2.3.1", "terminal", "orders", "tenant", "poison"} {
		if !strings.Contains(detail, want) {
			t.Errorf("message dialog lacks %q:\n%s", want, detail)
		}
	}
	screenshot(t, ctx, shots, "dlq-message.png")
	do(t, ctx, "press Escape", chromedp.KeyEvent(kb.Escape))
	waitJS(t, ctx, "the dialog to close", `!document.getElementById('message-dialog').open`, 5*time.Second)

	// Filters and search narrow the list; the export link follows them.
	do(t, ctx, "filter by error class", chromedp.SetValue(chromedp.CSS("#f-class"), "SchemaError"), chromedp.Click(chromedp.CSS(`#filters button[type=submit]`)))
	waitJS(t, ctx, "the filtered export link", `document.getElementById('export').getAttribute('href').includes('errorClass=SchemaError')`, 5*time.Second)
	do(t, ctx, "filter by a class nobody has", chromedp.SetValue(chromedp.CSS("#f-class"), "NoSuchError"), chromedp.Click(chromedp.CSS(`#filters button[type=submit]`)))
	waitJS(t, ctx, "no rows", `document.querySelectorAll('#messages tbody tr[data-id]').length === 0`, 5*time.Second)
	do(t, ctx, "clear the filters", chromedp.Click(chromedp.CSS("#clear-filters")))
	waitJS(t, ctx, "rows again", `document.querySelectorAll('#messages tbody tr[data-id]').length === 50`, 5*time.Second)
	// Search by text: the id of the last loaded row.
	id, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('#messages tbody tr[data-id]')].pop().dataset.id`))
	if err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "search", chromedp.SendKeys(chromedp.CSS("#search"), id[:13]))
	waitJS(t, ctx, "one match", `document.querySelectorAll('#messages tbody tr[data-id]').length === 1`, 5*time.Second)
	do(t, ctx, "clear the search", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input')); })()`))
	waitJS(t, ctx, "all rows again", `document.querySelectorAll('#messages tbody tr[data-id]').length === 50`, 5*time.Second)

	// 4. Dry run, then a redrive before the fix: the safety stop pauses it.
	do(t, ctx, "dry run", chromedp.Click(chromedp.CSS("#dry-run")))
	waitJS(t, ctx, "the dry-run result", `document.getElementById('dry-run-result').innerText.includes('60 messages would move')`, 5*time.Second)
	if s := text(t, ctx, "#dry-run-result"); !strings.Contains(s, "60 to orders") {
		t.Fatalf("dry run: %q", s)
	}
	if n := b.depth(t, "orders-dlq"); n != 60 {
		t.Fatalf("the dry run moved messages: DLQ holds %d", n)
	}
	do(t, ctx, "set the rate", chromedp.SetValue(chromedp.CSS("#r-rate"), "20"))
	do(t, ctx, "start the redrive", chromedp.Click(chromedp.CSS("#start-redrive")))
	// The confirmation names what will happen, from a dry run.
	waitJS(t, ctx, "the redrive confirmation", `document.querySelector('#confirm-dialog') && document.querySelector('#confirm-dialog').open`, 5*time.Second)
	if s := text(t, ctx, "#confirm-text"); !strings.Contains(s, "Move 60 messages from orders-dlq (60 to orders) at 20 per second") {
		t.Fatalf("redrive confirmation: %q", s)
	}
	do(t, ctx, "confirm the redrive", chromedp.Evaluate[chromedp.Void](`document.getElementById('confirm-ok').click()`))
	waitJS(t, ctx, "the safety stop", `document.querySelector('#task [data-status="PAUSED"]') !== null`, 20*time.Second)
	if s := text(t, ctx, "#task-reason"); !strings.Contains(s, "Safety stop") || !strings.Contains(s, "SchemaError") {
		t.Fatalf("pause reason: %q", s)
	}
	waitJS(t, ctx, "the resume button", `document.getElementById('resume-task') !== null && document.getElementById('cancel-task') !== null`, 5*time.Second)
	// While a task is active, Start says why it is disabled.
	waitJS(t, ctx, "the disabled start button's reason", `document.getElementById('start-redrive').disabled && document.getElementById('start-why').innerText.includes('A redrive is PAUSED on this queue')`, 5*time.Second)
	do(t, ctx, "scroll to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	screenshot(t, ctx, shots, "dlq.png")

	// 5. The fix is deployed; resume, then redrive what came back, and
	// watch the DLQ drain.
	fixed.Store(true)
	do(t, ctx, "resume", chromedp.Click(chromedp.CSS("#resume-task")))
	waitJS(t, ctx, "the resumed task to complete", `document.querySelector('#task [data-status="COMPLETED"]') !== null`, 30*time.Second)
	// Messages failed just before the fix may still be arriving: wait
	// until the DLQ holds still.
	left := b.depth(t, "orders-dlq")
	for stable := 0; stable < 5; {
		time.Sleep(200 * time.Millisecond)
		if n := b.depth(t, "orders-dlq"); n == left {
			stable++
		} else {
			left, stable = n, 0
		}
	}
	if left == 0 {
		t.Fatal("nothing came back during the safety stop; the test does not exercise the second redrive")
	}
	do(t, ctx, "dry run again", chromedp.Click(chromedp.CSS("#dry-run")))
	waitJS(t, ctx, "the second dry run", fmt.Sprintf(`document.getElementById('dry-run-result').innerText.includes('%d message')`, left), 5*time.Second)
	do(t, ctx, "redrive the rest", chromedp.Click(chromedp.CSS("#start-redrive")))
	waitJS(t, ctx, "the second confirmation", `document.querySelector('#confirm-dialog').open`, 5*time.Second)
	do(t, ctx, "confirm the second redrive", chromedp.Evaluate[chromedp.Void](`document.getElementById('confirm-ok').click()`))
	waitJS(t, ctx, "the second task to complete", `document.querySelector('#task [data-status="COMPLETED"] progress') !== null && document.getElementById('task-counts').innerText.startsWith('`+strconv.Itoa(left)+` of')`, 30*time.Second)
	waitJS(t, ctx, "the DLQ meter at 0", `document.querySelector('#dlq-depth .tile-value').textContent.trim().startsWith('0')`, 15*time.Second)
	waitJS(t, ctx, "no dead letters listed", `document.querySelectorAll('#messages tbody tr[data-id]').length === 0`, 10*time.Second)
	deadline := time.Now().Add(15 * time.Second)
	for b.depth(t, "orders-dlq") != 0 || b.depth(t, "orders") > 30 {
		if time.Now().After(deadline) {
			t.Fatalf("not drained: orders-dlq %d, orders %d", b.depth(t, "orders-dlq"), b.depth(t, "orders"))
		}
		time.Sleep(200 * time.Millisecond)
	}

	// 6. The queue page: configuration, charts, percentiles.
	do(t, ctx, "open the thumbnails queue", chromedp.Navigate(b.url+"/ui/#/queue/thumbnails"))
	waitJS(t, ctx, "the percentiles", `document.getElementById('percentiles') !== null`, 15*time.Second)
	if s := text(t, ctx, "main"); !strings.Contains(s, "Visibility timeout") || !strings.Contains(s, "thumbnails-dlq") || !strings.Contains(s, "shorter than p99") {
		t.Fatalf("queue page: %q", s[:min(len(s), 1500)])
	}
	screenshot(t, ctx, shots, "queue.png")

	// 7. The advisor.
	do(t, ctx, "open the advisor", chromedp.Click(chromedp.CSS(`a[data-nav="advisor"]`)))
	waitJS(t, ctx, "the findings", `document.querySelectorAll('#findings tbody tr.verdict-row-red').length > 0`, 10*time.Second)
	findings := text(t, ctx, "#findings")
	for _, want := range []string{"thumbnails\tvisibility", "duplicate deliveries", "max_receive_count", "emails", "fifo_groups", "dlq_owner", "dlq_retention"} {
		if !strings.Contains(findings, want) {
			t.Errorf("advisor lacks %q:\n%s", want, findings)
		}
	}
	screenshot(t, ctx, shots, "advisor.png")

	// 8. Keyboard: the skip link is the first stop and lands on main.
	do(t, ctx, "reload", chromedp.Reload())
	waitJS(t, ctx, "the advisor again", `document.querySelectorAll('#findings tbody tr').length > 0`, 10*time.Second)
	do(t, ctx, "tab", chromedp.KeyEvent(kb.Tab))
	if s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.className`)); s != "skip" {
		t.Errorf("the first tab stop is %q, want the skip link", s)
	}

	if errs := cons.errors(false); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestWithoutAlertsEndpoint: a broker without /sluice/v1/alerts still
// serves a working overview that says alerts are off, without a script
// error (the 404 itself is the network's, not the page's).
func TestWithoutAlertsEndpoint(t *testing.T) {
	ctx, cons := newBrowser(t)
	b := startBroker(t, false)
	b.createQueue(t, "jobs", nil, nil)
	do(t, ctx, "open the dashboard", chromedp.Navigate(b.url+"/ui/"))
	waitJS(t, ctx, "the queue", `document.querySelector('tr[data-queue="jobs"]') !== null`, 10*time.Second)
	waitJS(t, ctx, "the alerts note", `document.querySelector('.alerts').innerText.includes('not enabled')`, 10*time.Second)
	// Every page renders.
	for _, page := range []string{"#/queue/jobs", "#/dlq/jobs", "#/advisor", "#/topology", "#/nowhere"} {
		do(t, ctx, "open "+page, chromedp.Navigate(b.url+"/ui/"+page))
		waitJS(t, ctx, page, `document.querySelector('main h1') !== null`, 10*time.Second)
		if page == "#/topology" {
			// No AMQP here: the topology endpoint is a 404 and the page says so.
			waitJS(t, ctx, "the no-AMQP note", `document.querySelector('#topology-absent') !== null`, 10*time.Second)
		}
	}
	time.Sleep(time.Second)
	if errs := cons.errors(true); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
