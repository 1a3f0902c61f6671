package browser

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicemq/sluice/internal/engine"
)

// TestQueueActions drives the everyday actions from the dashboard: create
// a queue (with its DLQ), send a message with an attribute, browse it,
// purge, delete. Each asks for a confirmation naming what will happen, and
// a cancelled confirmation changes nothing.
func TestQueueActions(t *testing.T) {
	ctx, cons := newBrowser(t)
	b := startBroker(t, false)
	b.createQueue(t, "orders-dlq", nil, nil)
	do(t, ctx, "open the overview", chromedp.Navigate(b.url+"/ui/#/"))
	waitJS(t, ctx, "the overview", `document.querySelectorAll('#queues-table tbody tr').length === 1`, 10*time.Second)

	confirmText := func() string {
		t.Helper()
		waitJS(t, ctx, "a confirmation", `document.querySelector('#confirm-dialog') && document.querySelector('#confirm-dialog').open`, 5*time.Second)
		return text(t, ctx, "#confirm-text")
	}
	// answer presses a button of the open confirmation (a DOM click on it).
	answer := func(id string) {
		t.Helper()
		do(t, ctx, id, chromedp.Evaluate[chromedp.Void](`document.getElementById('`+id+`').click()`))
		waitJS(t, ctx, "the confirmation to close", `!document.querySelector('#confirm-dialog').open`, 5*time.Second)
	}

	// Create: the form, then the confirmation that names the queue, its
	// type and its dead-letter policy.
	do(t, ctx, "create queue", chromedp.Click(chromedp.CSS("#create-queue")))
	waitJS(t, ctx, "the create form and the DLQ choices", `document.querySelector('#create-dialog').open && document.querySelectorAll('#cq-dlq option').length === 3`, 5*time.Second)
	do(t, ctx, "fill the form",
		chromedp.SendKeys(chromedp.CSS("#cq-name"), "orders"),
		chromedp.SetValue(chromedp.CSS("#cq-dlq"), "orders-dlq"),
		chromedp.SetValue(chromedp.CSS("#cq-max"), "4"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('create-dialog-submit').click()`))
	if got := confirmText(); !strings.Contains(got, "Create the standard queue orders, dead-lettering into orders-dlq after 4 receives") {
		t.Fatalf("create confirmation: %q", got)
	}
	answer("confirm-cancel")
	if _, err := b.eng.GetQueue("orders"); err == nil {
		t.Fatal("a cancelled confirmation created the queue")
	}
	do(t, ctx, "submit again", chromedp.Evaluate[chromedp.Void](`document.getElementById('create-dialog-submit').click()`))
	confirmText()
	answer("confirm-ok")
	waitJS(t, ctx, "the new queue's page", `location.hash === '#/queue/orders' && !!document.querySelector('#send-message')`, 10*time.Second)
	cfg, err := b.eng.Config("orders")
	if err != nil || cfg.DeadLetter == nil || cfg.DeadLetter.Target != "orders-dlq" || cfg.DeadLetter.MaxReceiveCount != 4 {
		t.Fatalf("created config %+v, %v", cfg, err)
	}

	// Send a message with an attribute.
	do(t, ctx, "send", chromedp.Click(chromedp.CSS("#send-message")))
	waitJS(t, ctx, "the send form", `document.querySelector('#send-dialog').open`, 5*time.Second)
	do(t, ctx, "fill",
		chromedp.SendKeys(chromedp.CSS("#send-body"), `{"id":"o-42","customer":"c-1"}`),
		chromedp.SendKeys(chromedp.CSS("#send-attrs"), "tenant=acme"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('send-dialog-submit').click()`))
	if got := confirmText(); !strings.Contains(got, "Send one message (") || !strings.Contains(got, "1 attribute") || !strings.Contains(got, "to orders") {
		t.Fatalf("send confirmation: %q", got)
	}
	answer("confirm-ok")
	waitJS(t, ctx, "the sent notice", `document.querySelector('main').innerText.includes('Sent message')`, 10*time.Second)
	if n := b.depth(t, "orders"); n != 1 {
		t.Fatalf("orders holds %d messages", n)
	}

	// Browse it with the DLQ page's table.
	do(t, ctx, "browse", chromedp.Click(chromedp.CSS("#browse-messages")))
	waitJS(t, ctx, "the message in the table", `document.querySelectorAll('#messages tbody tr[data-id]').length === 1`, 10*time.Second)
	waitJS(t, ctx, "a heading for a queue that is not a DLQ", `document.getElementById('dlq-heading').innerText === 'Messages in orders'`, 10*time.Second)

	// Purge: the confirmation counts the messages.
	do(t, ctx, "back to the queue", chromedp.Navigate(b.url+"/ui/#/queue/orders"))
	waitJS(t, ctx, "the queue page with its count", `!!document.querySelector('#purge-queue') && document.querySelector('.tiles').innerText.includes('1')`, 10*time.Second)
	do(t, ctx, "purge", chromedp.Click(chromedp.CSS("#purge-queue")))
	if got := confirmText(); !strings.Contains(got, "Delete all 1 message in orders") {
		t.Fatalf("purge confirmation: %q", got)
	}
	answer("confirm-ok")
	waitJS(t, ctx, "the purge notice", `document.querySelector('main').innerText.includes('Purged orders')`, 10*time.Second)
	if n := b.depth(t, "orders"); n != 0 {
		t.Fatalf("orders holds %d messages after the purge", n)
	}

	// Delete: named, then gone, back on the overview.
	do(t, ctx, "delete", chromedp.Click(chromedp.CSS("#delete-queue")))
	if got := confirmText(); !strings.Contains(got, "Delete the queue orders and its 0 messages") {
		t.Fatalf("delete confirmation: %q", got)
	}
	answer("confirm-ok")
	waitJS(t, ctx, "the overview", `location.hash === '#/'`, 10*time.Second)
	if _, err := b.eng.GetQueue("orders"); err == nil {
		t.Fatal("orders still exists")
	}
	// Network errors aside (this broker has no alerts endpoint), no
	// script failed.
	if errs := cons.errors(true); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestCreateQueueWithOwnDLQ: the create form's second dead-letter choice
// creates the queue with its own DLQ, as `sluice queues create` does (both
// go through the admin API's one create path), after a confirmation that
// names both queues.
func TestCreateQueueWithOwnDLQ(t *testing.T) {
	ctx, cons := newBrowser(t)
	b := startBroker(t, false)
	do(t, ctx, "open the overview", chromedp.Navigate(b.url+"/ui/#/"))
	do(t, ctx, "create queue", chromedp.Click(chromedp.CSS("#create-queue")))
	waitJS(t, ctx, "the create form", `document.querySelector('#create-dialog').open && document.querySelectorAll('#cq-dlq option').length === 2`, 5*time.Second)
	do(t, ctx, "fill the form",
		chromedp.SendKeys(chromedp.CSS("#cq-name"), "billing.fifo"),
		chromedp.Click(chromedp.CSS("#cq-fifo")),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('cq-dlq').selectedIndex = 1`),
		chromedp.SetValue(chromedp.CSS("#cq-max"), "6"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('create-dialog-submit').click()`))
	waitJS(t, ctx, "a confirmation", `document.querySelector('#confirm-dialog') && document.querySelector('#confirm-dialog').open`, 5*time.Second)
	if got := text(t, ctx, "#confirm-text"); !strings.Contains(got, "Create the FIFO queue billing.fifo and its dead-letter queue billing-dlq.fifo, dead-lettering into it after 6 receives") {
		t.Fatalf("create confirmation: %q", got)
	}
	do(t, ctx, "confirm", chromedp.Evaluate[chromedp.Void](`document.getElementById('confirm-ok').click()`))
	waitJS(t, ctx, "the new queue's page", `location.hash === '#/queue/billing.fifo' && !!document.querySelector('#send-message')`, 10*time.Second)
	cfg, err := b.eng.Config("billing.fifo")
	if err != nil || cfg.DeadLetter == nil || cfg.DeadLetter.Target != "billing-dlq.fifo" || cfg.DeadLetter.MaxReceiveCount != 6 {
		t.Fatalf("created config %+v, %v", cfg, err)
	}
	if d, err := b.eng.Config("billing-dlq.fifo"); err != nil || !d.FIFO || d.Retention != 14*24*time.Hour {
		t.Fatalf("its DLQ: %+v, %v", d, err)
	}
	if errs := cons.errors(true); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestDLQRowAndSelectionRedrive: one dead letter is redriven from its row,
// two more by selecting them; each after a confirmation naming them. The
// selection button says why it is disabled while nothing is selected.
func TestDLQRowAndSelectionRedrive(t *testing.T) {
	ctx, cons := newBrowser(t)
	b := startBroker(t, false)
	b.createQueue(t, "orders-dlq", nil, nil)
	b.createQueue(t, "orders", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:orders-dlq","maxReceiveCount":"5"}`}, nil)
	var msgs []engine.Message
	for i := range 5 {
		msgs = append(msgs, engine.Message{Body: []byte(fmt.Sprintf(`{"id":"o-%d"}`, i))})
	}
	if _, err := b.eng.Send("orders", msgs); err != nil {
		t.Fatal(err)
	}
	ds, err := b.eng.Receive(context.Background(), "orders", engine.ReceiveRequest{Max: 10, WaitSet: true})
	if err != nil || len(ds) != 5 {
		t.Fatalf("receive: %d, %v", len(ds), err)
	}
	for _, d := range ds {
		if _, err := b.eng.ReportFailure("orders", d.ReceiptHandle, engine.Failure{ErrorClass: "SchemaError", Terminal: true}); err != nil {
			t.Fatal(err)
		}
	}
	do(t, ctx, "open the DLQ page", chromedp.Navigate(b.url+"/ui/#/dlq/orders-dlq"))
	waitJS(t, ctx, "the dead letters", `document.querySelectorAll('#messages tbody tr[data-id]').length === 5`, 10*time.Second)
	waitJS(t, ctx, "the disabled selection button and why", `document.getElementById('redrive-selected').disabled && document.getElementById('redrive-selected').title.includes('Select messages first')`, 5*time.Second)
	// The redrive form is above the list.
	waitJS(t, ctx, "the redrive form above the messages", `!!(document.getElementById('redrive').compareDocumentPosition(document.getElementById('messages')) & Node.DOCUMENT_POSITION_FOLLOWING)`, 5*time.Second)

	confirm := func(want string) {
		t.Helper()
		waitJS(t, ctx, "a confirmation", `document.querySelector('#confirm-dialog') && document.querySelector('#confirm-dialog').open`, 5*time.Second)
		if got := text(t, ctx, "#confirm-text"); !strings.Contains(got, want) {
			t.Fatalf("confirmation %q, want %q", got, want)
		}
		do(t, ctx, "confirm", chromedp.Evaluate[chromedp.Void](`document.getElementById('confirm-ok').click()`))
	}
	dlqDepth := func() int { return b.depth(t, "orders-dlq") }
	waitDepth := func(what string, want int) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for dlqDepth() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the DLQ holds %d, want %d", what, dlqDepth(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	first := text(t, ctx, `#messages tbody tr[data-id] code`)
	id, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#messages tbody tr[data-id]').dataset.id`))
	if !strings.HasPrefix(id, first) {
		t.Fatalf("row id %q, shown %q", id, first)
	}
	do(t, ctx, "redrive one row", chromedp.Evaluate[chromedp.Void](`document.querySelector('#messages tbody tr[data-id] .redrive-one').click()`))
	confirm("Move message " + id + " from orders-dlq to the queue it came from")
	waitDepth("after the row redrive", 4)
	waitJS(t, ctx, "the task to complete", `document.querySelector('#task [data-status="COMPLETED"]') !== null`, 15*time.Second)

	do(t, ctx, "refresh", chromedp.Click(chromedp.CSS("#refresh")))
	waitJS(t, ctx, "four rows", `document.querySelectorAll('#messages tbody tr[data-id]').length === 4`, 10*time.Second)
	do(t, ctx, "select two", chromedp.Evaluate[chromedp.Void](`(() => { const p = document.querySelectorAll('#messages tbody .pick'); p[0].click(); p[1].click(); })()`))
	waitJS(t, ctx, "the selection count", `!document.getElementById('redrive-selected').disabled && document.getElementById('redrive-selected').innerText.includes('(2)')`, 5*time.Second)
	do(t, ctx, "redrive the selection", chromedp.Evaluate[chromedp.Void](`document.getElementById('redrive-selected').click()`))
	confirm("Move 2 selected messages from orders-dlq to the queues they came from")
	waitDepth("after the selection redrive", 2)
	if n := b.depth(t, "orders"); n != 3 {
		t.Fatalf("orders holds %d, want the 3 redriven", n)
	}
	if errs := cons.errors(true); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
