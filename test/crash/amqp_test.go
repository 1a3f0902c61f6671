package crash

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	amqpQueue        = "crash-amqp"
	amqpProducers    = 2
	amqpConsumers    = 3
	amqpRate         = 800 // publishes per second per producer
	amqpWindow       = 64  // unconfirmed publishes per producer
	amqpPrefetch     = 50
	amqpBodyPad      = 200
	amqpDrainTimeout = 30 * time.Second
)

// TestAMQPCrash kills the server with SIGKILL at random moments while AMQP
// producers publish persistent messages with publisher confirms to a durable
// queue and consumers consume them with manual acks. After each kill the
// server restarts on the same data directory (on a new port) and the clients
// reconnect and carry on. At the end the queue is drained and, by message
// id:
//
//	(a) every message whose confirm (basic.ack) arrived is delivered
//	    (lost = 0);
//	(b) nothing is delivered that was never published (unexpected = 0), and
//	    every body is intact;
//	(c) no message is confirmed after a basic.nack (nack+ack = 0);
//	(d) a delivery of a confirmed message whose basic.ack could not be
//	    written (the server was gone) is delivered again (stranded = 0):
//	    the broker never saw the ack, so the message must come back, not
//	    stay leased. (A message may be delivered before its publish is
//	    fsynced; one never confirmed may be lost by the kill with its ack,
//	    and is only counted.)
//
// Duplicates are allowed and only counted: a message published but not yet
// confirmed at a kill may be stored, and the client may publish nothing
// twice, but a consumer's basic.ack is not acknowledged by the broker, so an
// ack in flight at the kill may be lost and the message redelivered. Such
// redeliveries after an ack are counted separately.
func TestAMQPCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs the server binary for tens of seconds")
	}
	iterations := 20
	if s := os.Getenv(envIterations); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", envIterations, s)
		}
		iterations = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSeed); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, s, err)
		}
		seed = n
	}
	t.Logf("%s=%d %s=%d", envIterations, iterations, envSeed, seed)
	bin := Binary(t)
	runAMQPCrash(t, bin, iterations, seed)
}

// amqpLife is one life of the server process.
type amqpLife struct {
	srv  *Server
	url  string        // amqp://guest:guest@host:port/
	dead chan struct{} // closed just before the process is killed
}

func (l *amqpLife) Dead() <-chan struct{} { return l.dead }

// amqpLedger is what clients were told, by message id.
type amqpLedger struct {
	mu        sync.Mutex
	published map[uint64]bool // id → publish written (value: confirmed)
	nacked    map[uint64]bool
	delivered map[uint64]int  // deliveries per id
	acked     map[uint64]bool // a basic.ack was written for it
	// unsettled: delivered, but the basic.ack could not be written (the
	// connection was gone), so the broker must deliver it again.
	unsettled map[uint64]bool

	confirms     atomic.Uint64
	nackAck      atomic.Uint64 // ack confirm of an id already nacked
	unexpected   atomic.Uint64 // deliveries of ids never published
	corrupt      atomic.Uint64 // bodies not matching their id
	redelivered  atomic.Uint64 // deliveries beyond the first
	afterAck     atomic.Uint64 // of which after the consumer acked it
	deliveries   atomic.Uint64
	firstCorrupt atomic.Value // string
}

func amqpBody(id uint64) []byte {
	b := make([]byte, 0, 24+amqpBodyPad)
	b = append(b, "crash-amqp:"...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, ':')
	for i := range amqpBodyPad {
		b = append(b, 'a'+byte((id+uint64(i))%26))
	}
	return b
}

func amqpBodyID(b []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(b, []byte("crash-amqp:"))
	if !ok {
		return 0, false
	}
	num, _, ok := bytes.Cut(rest, []byte{':'})
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(string(num), 10, 64)
	return id, err == nil
}

func (l *amqpLedger) confirm(id uint64, ack bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ack {
		l.nacked[id] = true
		return
	}
	if l.nacked[id] {
		l.nackAck.Add(1)
	}
	l.published[id] = true
	l.confirms.Add(1)
}

// deliver records a delivery and reports whether it is one of ours.
func (l *amqpLedger) deliver(body []byte) (uint64, bool) {
	l.deliveries.Add(1)
	id, ok := amqpBodyID(body)
	if !ok {
		l.unexpected.Add(1)
		return 0, false
	}
	if !bytes.Equal(body, amqpBody(id)) {
		l.corrupt.Add(1)
		l.firstCorrupt.CompareAndSwap(nil, fmt.Sprintf("id %d: %q", id, body))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.published[id]; !ok {
		l.unexpected.Add(1)
		return id, false
	}
	l.delivered[id]++
	delete(l.unsettled, id)
	if l.delivered[id] > 1 {
		l.redelivered.Add(1)
		if l.acked[id] {
			l.afterAck.Add(1)
		}
	}
	return id, true
}

func (l *amqpLedger) ack(id uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok {
		l.acked[id] = true
		delete(l.unsettled, id)
	} else if !l.acked[id] {
		l.unsettled[id] = true
	}
}

// stranded counts confirmed ids delivered whose ack never reached the
// broker and that were not delivered again since. An id never confirmed is
// not counted (unconfirmedLost has those): the broker may deliver a message
// before its publish is fsynced, so a kill in between may lose both the
// message and the ack that could not be sent, and nothing was promised for
// it.
func (l *amqpLedger) stranded() (n int, example []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.unsettled {
		if !l.published[id] {
			continue
		}
		n++
		if len(example) < 10 {
			example = append(example, id)
		}
	}
	return n, example
}

// unconfirmedLost counts the ids stranded leaves out: delivered before
// their publish was confirmed, their ack not sent, not delivered again.
func (l *amqpLedger) unconfirmedLost() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for id := range l.unsettled {
		if !l.published[id] {
			n++
		}
	}
	return n
}

// missing counts confirmed ids not delivered yet.
func (l *amqpLedger) missing() (n int, example []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, confirmed := range l.published {
		if confirmed && l.delivered[id] == 0 {
			n++
			if len(example) < 10 {
				example = append(example, id)
			}
		}
	}
	return n, example
}

// amqpOpen connects, opens a channel and declares the durable queue.
func amqpOpen(url string) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{
		Heartbeat: 5 * time.Second,
		Dial:      amqp.DefaultDial(2 * time.Second),
	})
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclare(amqpQueue, true, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

func runAMQPCrash(t *testing.T, bin string, iterations int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xa3a9))
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	failf := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nserver log tail:\n%s", append(args, Tail(dir))...)
	}
	start := func() *amqpLife {
		t.Helper()
		srv, err := Start(ctx, bin, dir, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if srv.AMQP == "" {
			_ = srv.Kill()
			failf("the ready file names no AMQP listener")
		}
		return &amqpLife{srv: srv, url: srv.AMQPURL(), dead: make(chan struct{})}
	}

	cl := NewLives[*amqpLife]()
	life := start()
	cl.Set(life)
	defer func() {
		if l := cl.cur; l != nil {
			if err := l.srv.Stop(10 * time.Second); err != nil {
				t.Log(err)
			}
		}
	}()

	led := &amqpLedger{published: map[uint64]bool{}, nacked: map[uint64]bool{},
		delivered: map[uint64]int{}, acked: map[uint64]bool{}, unsettled: map[uint64]bool{}}
	var nextID atomic.Uint64
	prodCtx, stopProducers := context.WithCancel(ctx)
	consCtx, stopConsumers := context.WithCancel(ctx)
	defer stopProducers()
	defer stopConsumers()
	var pwg, cwg sync.WaitGroup
	for range amqpProducers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			amqpProduce(prodCtx, cl, led, &nextID)
		}()
	}
	for range amqpConsumers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			amqpConsume(consCtx, cl, led)
		}()
	}

	began := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := range iterations {
		// Let load run on this life: until new confirms and deliveries
		// arrived (progress after the restart), and then for a random
		// 100-1000 ms, so kills land at arbitrary points of publishing,
		// fsyncing, delivering and acking.
		c0, d0 := led.confirms.Load(), led.deliveries.Load()
		progress := time.Now().Add(20 * time.Second)
		for led.confirms.Load() < c0+100 || led.deliveries.Load() < d0+100 {
			if time.Now().After(progress) {
				failf("iteration %d: no progress in 20s after restart (confirms %d→%d, deliveries %d→%d)",
					i, c0, led.confirms.Load(), d0, led.deliveries.Load())
			}
			<-tick.C
		}
		wait := time.NewTimer(time.Duration(100+rng.IntN(900)) * time.Millisecond)
		<-wait.C

		cl.mu.Lock()
		cl.cur = nil
		cl.mu.Unlock()
		close(life.dead)
		if err := life.srv.Kill(); err != nil {
			t.Fatalf("iteration %d: kill: %v", i, err)
		}
		life = start()
		cl.Set(life)
	}
	t.Logf("%d kills in %v; %d ids published, %d confirms, %d deliveries so far",
		iterations, time.Since(began).Round(time.Millisecond), nextID.Load(), led.confirms.Load(), led.deliveries.Load())

	// Stop publishing, then let consumers drain until every confirmed
	// message was delivered and every delivery whose ack failed was
	// delivered again.
	stopProducers()
	pwg.Wait()
	deadline := time.Now().Add(amqpDrainTimeout)
	for {
		n, _ := led.missing()
		m, _ := led.stranded()
		if n+m == 0 || time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	stopConsumers()
	cwg.Wait()

	// Whatever is left in the queue (published but unconfirmed messages,
	// redeliveries of lost acks): get it with basic.get, acking each.
	conn, ch, err := amqpOpen(life.url)
	if err != nil {
		failf("final drain: %v", err)
	}
	left := 0
	for {
		d, ok, err := ch.Get(amqpQueue, false)
		if err != nil {
			failf("final drain: get: %v", err)
		}
		if !ok {
			break
		}
		left++
		led.deliver(d.Body)
		if err := d.Ack(false); err != nil {
			failf("final drain: ack: %v", err)
		}
	}
	conn.Close()

	missing, examples := led.missing()
	stranded, strandedEx := led.stranded()
	led.mu.Lock()
	confirmed, unconfirmed := 0, 0
	for _, c := range led.published {
		if c {
			confirmed++
		} else {
			unconfirmed++
		}
	}
	nacked := len(led.nacked)
	led.mu.Unlock()
	t.Logf("published %d (confirmed %d, never confirmed %d, nacked %d); deliveries %d, redelivered %d (%d after the consumer's ack), left in queue at the end %d; delivered before a confirm that never came, ack lost and not delivered again (allowed) %d",
		nextID.Load(), confirmed, unconfirmed, nacked, led.deliveries.Load(), led.redelivered.Load(), led.afterAck.Load(), left, led.unconfirmedLost())
	if confirmed == 0 {
		failf("no message was confirmed")
	}
	if missing > 0 {
		failf("lost: %d confirmed messages never delivered, e.g. ids %v", missing, examples)
	}
	if stranded > 0 {
		failf("stranded: %d messages delivered whose ack could not be sent (connection gone) were never delivered again, e.g. ids %v", stranded, strandedEx)
	}
	if n := led.unexpected.Load(); n > 0 {
		failf("unexpected: %d deliveries of messages never published", n)
	}
	if n := led.corrupt.Load(); n > 0 {
		failf("corrupt: %d bodies do not match their id; first: %v", n, led.firstCorrupt.Load())
	}
	if n := led.nackAck.Load(); n > 0 {
		failf("%d messages were confirmed after a basic.nack", n)
	}
}

// amqpProduce publishes persistent messages with confirms, amqpWindow
// unconfirmed at most, at amqpRate per second, reconnecting after every
// failure. A message counts as published (the ledger may see it delivered)
// before its publish is written; it counts as confirmed only when its
// basic.ack arrives.
func amqpProduce(ctx context.Context, cl *Lives[*amqpLife], led *amqpLedger, nextID *atomic.Uint64) {
	interval := time.Second / amqpRate
	for ctx.Err() == nil {
		life, err := cl.Current(ctx)
		if err != nil {
			return
		}
		if err := amqpProduceOn(ctx, life, led, nextID, interval); err != nil && ctx.Err() == nil {
			cl.AfterError(ctx, life)
		}
	}
}

func amqpProduceOn(ctx context.Context, life *amqpLife, led *amqpLedger, nextID *atomic.Uint64, interval time.Duration) error {
	conn, ch, err := amqpOpen(life.url)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, amqpWindow))
	var mu sync.Mutex
	tags := make(map[uint64]uint64, amqpWindow) // delivery tag → id
	sem := make(chan struct{}, amqpWindow)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range confirms {
			mu.Lock()
			id, ok := tags[c.DeliveryTag]
			delete(tags, c.DeliveryTag)
			mu.Unlock()
			if ok {
				led.confirm(id, c.Ack)
			}
			<-sem
		}
	}()
	defer func() {
		conn.Close()
		<-done
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// Wait (briefly) for the outstanding confirms, so that the
			// ledger knows what the broker acknowledged.
			wait := time.NewTimer(5 * time.Second)
			defer wait.Stop()
			for range amqpWindow {
				select {
				case sem <- struct{}{}:
					continue
				case <-done:
				case <-wait.C:
				case <-life.dead:
				}
				break
			}
			return nil
		case <-life.dead:
			return errors.New("server killed")
		case <-done:
			return errors.New("channel closed")
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			continue
		case <-life.dead:
			return errors.New("server killed")
		case <-done:
			return errors.New("channel closed")
		}
		id := nextID.Add(1)
		led.mu.Lock()
		led.published[id] = false
		led.mu.Unlock()
		mu.Lock()
		tags[ch.GetNextPublishSeqNo()] = id
		mu.Unlock()
		err := ch.PublishWithContext(ctx, "", amqpQueue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			Body:         amqpBody(id),
		})
		if err != nil {
			return err
		}
	}
}

// amqpConsume consumes with manual acks, reconnecting after every failure.
func amqpConsume(ctx context.Context, cl *Lives[*amqpLife], led *amqpLedger) {
	for ctx.Err() == nil {
		life, err := cl.Current(ctx)
		if err != nil {
			return
		}
		if err := amqpConsumeOn(ctx, life, led); err != nil && ctx.Err() == nil {
			cl.AfterError(ctx, life)
		}
	}
}

func amqpConsumeOn(ctx context.Context, life *amqpLife, led *amqpLedger) error {
	conn, ch, err := amqpOpen(life.url)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Qos(amqpPrefetch, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(amqpQueue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-life.dead:
			return errors.New("server killed")
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("deliveries closed")
			}
			id, ours := led.deliver(d.Body)
			err := d.Ack(false)
			if ours {
				led.ack(id, err == nil)
			}
			if err != nil {
				return err
			}
		}
	}
}
