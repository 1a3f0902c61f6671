package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// SQSResult is what one RunSQS measured. Durations are in nanoseconds in
// JSON.
type SQSResult struct {
	Queue     string  `json:"queue"`
	QueueURL  string  `json:"queue_url"`
	FIFO      bool    `json:"fifo"`
	Producers int     `json:"producers"`
	Consumers int     `json:"consumers"`
	Batch     int     `json:"batch"`
	Size      int     `json:"size_bytes"`
	Rate      float64 `json:"target_rate"` // 0 = as fast as possible

	Backlog     int           `json:"backlog"`    // messages sent before the run (-backlog)
	BacklogTime time.Duration `json:"backlog_ns"` // how long sending them took

	Sent     uint64 `json:"sent"`     // acknowledged by SendMessageBatch
	Received uint64 `json:"received"` // deliveries of this run's messages, redeliveries included
	Deleted  uint64 `json:"deleted"`  // acknowledged by DeleteMessageBatch
	Stale    uint64 `json:"stale"`    // messages of earlier runs found (and deleted)
	Receives uint64 `json:"receives"` // ReceiveMessage calls answered, empty ones included
	Empty    uint64 `json:"empty_receives"`

	SendElapsed time.Duration `json:"send_elapsed_ns"` // start → last send answered
	Elapsed     time.Duration `json:"elapsed_ns"`      // start → last delete answered
	SendRate    float64       `json:"send_rate"`       // Sent / SendElapsed, msg/s
	Throughput  float64       `json:"throughput"`      // Deleted / Elapsed, msg/s end to end

	// Latency is send → receive of this run's messages, from the timestamp
	// in each body (see body.go), over every delivery.
	Latency LatencySummary `json:"latency"`
	// SendRTT and DeleteRTT are the round trips of SendMessageBatch and
	// DeleteMessageBatch requests: what a client waits for a durable ack.
	SendRTT   LatencySummary `json:"send_rtt"`
	DeleteRTT LatencySummary `json:"delete_rtt"`

	// Errors counts failed requests and failed batch entries by SQS error
	// code; "transport" is a connection-level failure.
	Errors map[string]uint64 `json:"errors"`

	// CPU is the broker's (with -pid), this process's and the machine's
	// CPU time during the run, per 100,000 deleted messages (sent, with
	// -consumers 0).
	CPUUse
}

// LatencySummary is a digest of a Histogram.
type LatencySummary struct {
	Count uint64        `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	Max   time.Duration `json:"max_ns"`
}

func summarize(h *Histogram) LatencySummary {
	return LatencySummary{
		Count: h.Count(), Mean: h.Mean(), Max: h.Max(),
		P50: h.Quantile(0.50), P90: h.Quantile(0.90), P99: h.Quantile(0.99), P999: h.Quantile(0.999),
	}
}

// RunSQS runs producers and consumers against an SQS endpoint and writes a
// table (or, with o.JSON, one JSON object) to out.
//
// Producers send SendMessageBatch requests of o.Batch messages of o.Size
// bytes, for o.Duration or until o.Messages are sent. Consumers long-poll
// ReceiveMessage and delete every batch at once with DeleteMessageBatch. The
// run ends when consumers have received as many of this run's messages as
// were sent (or after o.DrainTimeout). Canceling ctx stops the run early; the
// result then covers what happened until then and the error is ctx.Err().
func RunSQS(ctx context.Context, o SQSOptions, out io.Writer) (SQSResult, error) {
	if err := o.Validate(); err != nil {
		return SQSResult{}, err
	}
	c := newClient(o.Endpoint, o.Producers+o.Consumers)
	defer c.close()
	qurl, err := c.createQueue(ctx, o.queueName(), o.FIFO)
	if err != nil {
		return SQSResult{}, err
	}
	r := &run{o: o, c: c, queueURL: qurl, id: rand.Uint32()}
	filled, err := fillBacklog(ctx, o.Backlog, r.fill)
	if err != nil {
		return SQSResult{}, err
	}
	res, err := r.do(ctx)
	res.Backlog, res.BacklogTime = o.Backlog, filled
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return res, err
	}
	if werr := writeResult(out, o.JSON, &res); werr != nil {
		return res, werr
	}
	return res, err
}

// run is the shared state of one RunSQS. Counters are atomics updated once
// per request; histograms and error maps belong to one worker each and are
// merged after the workers stopped.
type run struct {
	o        SQSOptions
	c        *client
	queueURL string
	id       uint32    // run id written into every body
	t0       time.Time // stamps are time.Since(t0)

	reserved atomic.Int64 // messages claimed by producers (-messages mode)
	sent     atomic.Uint64
	received atomic.Uint64
	deleted  atomic.Uint64
	stale    atomic.Uint64
	receives atomic.Uint64
	empty    atomic.Uint64

	producersDone atomic.Bool
	lastSend      atomic.Int64 // ns since t0 of the last answered send
	lastDelete    atomic.Int64 // ns since t0 of the last answered delete
	stopConsumers context.CancelFunc
}

type worker struct {
	hist   Histogram // end-to-end latency (consumers)
	rtt    Histogram // request round trips: sends (producers), deletes (consumers)
	errors map[string]uint64
	resp   bytes.Buffer
}

func (w *worker) countErr(code string, n uint64) {
	if w.errors == nil {
		w.errors = make(map[string]uint64)
	}
	w.errors[code] += n
}

func (r *run) do(ctx context.Context) (SQSResult, error) {
	o := r.o
	cpu, err := startCPU(o.PID)
	if err != nil {
		return SQSResult{}, err
	}

	consumeCtx, stop := context.WithCancel(ctx)
	defer stop()
	r.stopConsumers = stop
	r.t0 = time.Now()
	var deadline time.Time
	if o.Messages == 0 {
		deadline = r.t0.Add(o.Duration)
	}

	producers := make([]*worker, o.Producers)
	consumers := make([]*worker, o.Consumers)
	var pwg, cwg sync.WaitGroup
	for i := range consumers {
		consumers[i] = &worker{}
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			r.consume(consumeCtx, consumers[i])
		}()
	}
	for i := range producers {
		producers[i] = &worker{}
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			r.produce(ctx, i, deadline, producers[i])
		}()
	}
	pwg.Wait()
	r.producersDone.Store(true)
	if r.received.Load() >= r.sent.Load() {
		stop()
	}
	drain := time.AfterFunc(o.DrainTimeout, stop)
	cwg.Wait()
	drain.Stop()

	res := SQSResult{
		Queue: o.queueName(), QueueURL: r.queueURL, FIFO: o.FIFO,
		Producers: o.Producers, Consumers: o.Consumers, Batch: o.Batch, Size: o.Size, Rate: o.Rate,
		Sent: r.sent.Load(), Received: r.received.Load(), Deleted: r.deleted.Load(), Stale: r.stale.Load(),
		Receives: r.receives.Load(), Empty: r.empty.Load(),
		SendElapsed: time.Duration(r.lastSend.Load()),
		Elapsed:     time.Duration(r.lastDelete.Load()),
		Errors:      map[string]uint64{},
	}
	if res.SendElapsed > 0 {
		res.SendRate = float64(res.Sent) / res.SendElapsed.Seconds()
	}
	if res.Elapsed > 0 {
		res.Throughput = float64(res.Deleted) / res.Elapsed.Seconds()
	}
	var h, send, del Histogram
	for _, w := range producers {
		send.Merge(&w.rtt)
	}
	for _, w := range consumers {
		del.Merge(&w.rtt)
	}
	for _, w := range append(producers, consumers...) {
		h.Merge(&w.hist)
		for code, n := range w.errors {
			res.Errors[code] += n
		}
	}
	res.Latency, res.SendRTT, res.DeleteRTT = summarize(&h), summarize(&send), summarize(&del)
	perMessage := res.Deleted
	if o.Consumers == 0 {
		perMessage = res.Sent // send only: the CPU per message sent
	}
	if res.CPUUse, err = cpu.stop(perMessage); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// sendBatch is a pre-encoded SendMessageBatch request: the JSON is built once
// and only the stamp (and, for FIFO, deduplication id) digits are rewritten
// before each send.
type sendBatch struct {
	json   []byte
	stamps []int // offsets of the 16 stamp digits of each entry's body
	seqs   []int // FIFO: offsets of the 16 sequence digits of each dedup id
}

func (r *run) encodeSendBatch(producer, n int) *sendBatch {
	b := &sendBatch{}
	body := newBody(r.id, r.o.Size)
	j := make([]byte, 0, n*(r.o.Size+160)+len(r.queueURL)+40)
	j = append(j, `{"QueueUrl":`...)
	j = appendJSONString(j, r.queueURL)
	j = append(j, `,"Entries":[`...)
	for i := range n {
		if i > 0 {
			j = append(j, ',')
		}
		j = append(j, `{"Id":"`...)
		j = strconv.AppendInt(j, int64(i), 10)
		j = append(j, `","MessageBody":"`...)
		b.stamps = append(b.stamps, len(j)+stampOff)
		j = append(j, body...) // only [0-9a-fx.S] characters: no escaping needed
		j = append(j, '"')
		if r.o.FIFO {
			j = append(j, `,"MessageGroupId":"g`...)
			j = strconv.AppendInt(j, int64(producer), 10)
			j = append(j, '-')
			j = strconv.AppendInt(j, int64(i), 10)
			j = append(j, `","MessageDeduplicationId":"`...)
			j = append(j, body[runOff:runOff+8]...)
			j = append(j, '-')
			j = strconv.AppendInt(j, int64(producer), 10)
			j = append(j, '-')
			b.seqs = append(b.seqs, len(j))
			j = append(j, "0000000000000000"...)
			j = append(j, '"')
		}
		j = append(j, '}')
	}
	b.json = append(j, "]}"...)
	return b
}

// produce sends batches until the deadline (duration mode) or until the
// -messages budget is used up.
func (r *run) produce(ctx context.Context, id int, deadline time.Time, w *worker) {
	o := r.o
	full := r.encodeSendBatch(id, o.Batch)
	var interval time.Duration
	var next time.Time
	if o.Rate > 0 {
		interval = time.Duration(float64(o.Batch*o.Producers) / o.Rate * float64(time.Second))
		next = r.t0.Add(interval * time.Duration(id) / time.Duration(o.Producers)) // spread the producers' phases
	}
	var resp struct {
		Successful []struct{}
		Failed     []struct{ Code string }
	}
	var seq uint64
	var backoff time.Duration
	timer := time.NewTimer(0)
	<-timer.C
	for {
		if ctx.Err() != nil {
			return
		}
		n := o.Batch
		if o.Messages > 0 {
			left := int64(o.Messages) - r.reserved.Add(int64(n))
			if left < 0 {
				n += int(left)
				if n <= 0 {
					return
				}
			}
		}
		if interval > 0 {
			// A producer that falls behind the schedule sends back to back
			// (the achieved rate is reported) but still stops at the deadline.
			if !deadline.IsZero() && (next.After(deadline) || !time.Now().Before(deadline)) {
				return
			}
			if d := time.Until(next); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
			}
			next = next.Add(interval)
		} else if !deadline.IsZero() && !time.Now().Before(deadline) {
			return
		}

		batch := full
		if n < o.Batch {
			batch = r.encodeSendBatch(id, n) // the one short batch at the end of -messages
		}
		stamp := uint64(time.Since(r.t0))
		for i, off := range batch.stamps {
			putHex(batch.json[off:off+16], stamp)
			if o.FIFO {
				seq++
				putHex(batch.json[batch.seqs[i]:batch.seqs[i]+16], seq)
			}
		}
		began := time.Now()
		err := r.c.call(ctx, "AmazonSQS.SendMessageBatch", batch.json, &w.resp)
		rtt := time.Since(began)
		if err == nil {
			resp.Successful, resp.Failed = resp.Successful[:0], resp.Failed[:0] // absent members keep old values
			err = json.Unmarshal(w.resp.Bytes(), &resp)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.countErr(errCode(err), 1)
			if o.Messages > 0 {
				r.reserved.Add(-int64(n)) // try these again
			}
			backoff = r.pause(ctx, backoff)
			continue
		}
		backoff = 0
		w.rtt.Record(rtt)
		r.sent.Add(uint64(len(resp.Successful)))
		for _, f := range resp.Failed {
			w.countErr(f.Code, 1)
		}
		if o.Messages > 0 && len(resp.Failed) > 0 {
			r.reserved.Add(-int64(len(resp.Failed)))
		}
		storeMax(&r.lastSend, int64(time.Since(r.t0)))
	}
}

// recvMsg decodes only what a consumer needs: the handle and the body's
// prefix (bodyStamp does not allocate the body).
type recvMsg struct {
	ReceiptHandle string
	Body          bodyStamp
}

func (r *run) consume(ctx context.Context, w *worker) {
	o := r.o
	recvReq, _ := json.Marshal(struct {
		QueueUrl            string
		MaxNumberOfMessages int
		WaitTimeSeconds     int
		VisibilityTimeout   int
	}{r.queueURL, o.Batch, o.Wait, o.Visibility})
	var recv struct{ Messages []recvMsg }
	var del struct {
		Successful []struct{ Id string }
		Failed     []struct{ Code string }
	}
	delReq := make([]byte, 0, 4096)
	var backoff time.Duration
	for ctx.Err() == nil {
		if r.producersDone.Load() && r.received.Load() >= r.sent.Load() {
			r.stopConsumers()
			return
		}
		err := r.c.call(ctx, "AmazonSQS.ReceiveMessage", recvReq, &w.resp)
		if err == nil {
			clear(recv.Messages[:cap(recv.Messages)]) // Unmarshal decodes into reused elements
			recv.Messages = recv.Messages[:0]
			err = json.Unmarshal(w.resp.Bytes(), &recv)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.countErr(errCode(err), 1)
			backoff = r.pause(ctx, backoff)
			continue
		}
		backoff = 0
		r.receives.Add(1)
		if len(recv.Messages) == 0 {
			r.empty.Add(1)
			continue
		}
		now := time.Since(r.t0)
		var mine uint64
		for _, m := range recv.Messages {
			if m.Body.ok && m.Body.run == r.id {
				w.hist.Record(now - time.Duration(m.Body.stamp))
				mine++
			} else {
				r.stale.Add(1)
			}
		}
		r.received.Add(mine)

		delReq = append(delReq[:0], `{"QueueUrl":`...)
		delReq = appendJSONString(delReq, r.queueURL)
		delReq = append(delReq, `,"Entries":[`...)
		for i, m := range recv.Messages {
			if i > 0 {
				delReq = append(delReq, ',')
			}
			delReq = append(delReq, `{"Id":"`...)
			delReq = strconv.AppendInt(delReq, int64(i), 10)
			delReq = append(delReq, `","ReceiptHandle":`...)
			delReq = appendJSONString(delReq, m.ReceiptHandle)
			delReq = append(delReq, '}')
		}
		delReq = append(delReq, "]}"...)
		// The delete uses the parent context's lifetime, not ctx: a batch
		// received must be deleted even when the run is ending.
		began := time.Now()
		err = r.c.call(context.WithoutCancel(ctx), "AmazonSQS.DeleteMessageBatch", delReq, &w.resp)
		rtt := time.Since(began)
		if err == nil {
			del.Successful, del.Failed = del.Successful[:0], del.Failed[:0]
			err = json.Unmarshal(w.resp.Bytes(), &del)
		}
		if err != nil {
			w.countErr(errCode(err), 1)
			continue
		}
		w.rtt.Record(rtt)
		for _, s := range del.Successful {
			if i, err := strconv.Atoi(s.Id); err == nil && i >= 0 && i < len(recv.Messages) &&
				recv.Messages[i].Body.ok && recv.Messages[i].Body.run == r.id {
				r.deleted.Add(1)
			}
		}
		for _, f := range del.Failed {
			w.countErr(f.Code, 1)
		}
		storeMax(&r.lastDelete, int64(time.Since(r.t0)))
	}
}

// pause waits before a retry after an error: 10 ms, doubling to 500 ms, so a
// broker that is down is not spun on.
func (r *run) pause(ctx context.Context, last time.Duration) time.Duration {
	d := min(max(2*last, 10*time.Millisecond), 500*time.Millisecond)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return d
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// errCode names an error for the error table.
func errCode(err error) string {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae.Code
	case errors.As(err, new(*json.SyntaxError)), errors.As(err, new(*json.UnmarshalTypeError)):
		return "bad-response"
	default:
		return "transport"
	}
}

// WriteTable prints the result as a compact human-readable table.
func (res *SQSResult) WriteTable(w io.Writer) {
	rate := "max"
	if res.Rate > 0 {
		rate = strconv.FormatFloat(res.Rate, 'f', -1, 64) + " msg/s"
	}
	fmt.Fprintf(w, "sluice bench sqs: queue=%s fifo=%t producers=%d consumers=%d batch=%d size=%dB rate=%s\n",
		res.Queue, res.FIFO, res.Producers, res.Consumers, res.Batch, res.Size, rate)
	if res.Backlog > 0 {
		fmt.Fprintf(w, "  %-12s %10d  sent with nobody receiving in %s before the run\n", "backlog",
			res.Backlog, res.BacklogTime.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "  %-12s %10d  %10.0f msg/s over %s\n", "sent", res.Sent, res.SendRate, res.SendElapsed.Round(time.Millisecond))
	perRecv := 0.0
	if res.Receives > res.Empty {
		perRecv = float64(res.Received+res.Stale) / float64(res.Receives-res.Empty)
	}
	fmt.Fprintf(w, "  %-12s %10d  in %d receives (%d empty, %.1f messages per non-empty)\n", "received", res.Received, res.Receives, res.Empty, perRecv)
	fmt.Fprintf(w, "  %-12s %10d  %10.0f msg/s end to end over %s\n", "deleted", res.Deleted, res.Throughput, res.Elapsed.Round(time.Millisecond))
	if res.Stale > 0 {
		fmt.Fprintf(w, "  %-12s %10d  (messages of earlier runs, deleted)\n", "stale", res.Stale)
	}
	printLatencies(w, namedLatency{"latency", res.Latency}, namedLatency{"send rtt", res.SendRTT}, namedLatency{"delete rtt", res.DeleteRTT})
	printCPU(w, res.CPUUse, res.Elapsed)
	printErrors(w, res.Errors)
}

// fill sends o.Backlog messages of another run id (the consumers count
// them as stale) with o.Producers producers in -messages mode, as fast as
// the broker takes them, and nobody receiving.
func (r *run) fill(ctx context.Context) error {
	fo := r.o
	fo.Messages, fo.Rate = r.o.Backlog, 0
	f := &run{o: fo, c: r.c, queueURL: r.queueURL, id: r.id + 1, t0: time.Now()}
	var wg sync.WaitGroup
	ws := make([]*worker, fo.Producers)
	for i := range ws {
		ws[i] = &worker{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.produce(ctx, i, time.Time{}, ws[i])
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	if n := f.sent.Load(); n < uint64(fo.Messages) {
		return fmt.Errorf("bench: backlog: %d of %d messages sent", n, fo.Messages)
	}
	return nil
}

// fillBacklog runs fill when backlog > 0 (-backlog) and returns how long
// it took.
func fillBacklog(ctx context.Context, backlog int, fill func(context.Context) error) (time.Duration, error) {
	if backlog <= 0 {
		return 0, nil
	}
	start := time.Now()
	err := fill(ctx)
	return time.Since(start), err
}
