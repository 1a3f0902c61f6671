// Package brokertest starts real Sluice brokers for tests: server.New and
// Server.Run, exactly as `sluice server` runs them, with a t.TempDir() data
// directory and every listener on 127.0.0.1:0. Tests then drive the broker
// with real clients (aws-sdk-go-v2, amqp091-go, boto3) through SQSURL and
// AMQPURL.
//
// It replaces the start-a-server helper each test package used to write for
// itself. Only test code imports it.
package brokertest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/sluicemq/sluice/internal/server"
)

// Broker is one running broker. Stop it with Stop, or let the test's
// cleanup stop it.
type Broker struct {
	// Server is the running server (its Engine, addresses, counters).
	Server *server.Server
	// Options are the options it was started with, after Start forced its
	// listeners onto 127.0.0.1:0.
	Options server.Options

	cancel  context.CancelFunc
	done    chan struct{}
	runErr  error
	stopped bool
}

// Options returns server.DefaultOptions with a fresh t.TempDir() data
// directory and the SQS and AMQP listeners on 127.0.0.1:0: what most tests
// start from. Change what the test needs, then call Start.
func Options(t testing.TB) server.Options {
	t.Helper()
	o := server.DefaultOptions()
	o.DataDir = t.TempDir()
	o.SQSListen, o.AMQPListen = "127.0.0.1:0", "127.0.0.1:0"
	return o
}

// Start starts a broker with opts. When it returns the listeners are open
// and Run has been started, so clients may connect at once. Every
// listener that is on (SQSListen, and AMQPListen and AMQPSListen when not
// "") is moved to 127.0.0.1:0, whatever opts or a loaded config file say:
// tests never take fixed ports. log nil discards the broker's log (as
// server.New does).
//
// A broker that fails to start fails the test. The test's cleanup stops
// the broker if the test has not, and fails the test if Run returned an
// error.
func Start(t testing.TB, opts server.Options, log *slog.Logger) *Broker {
	t.Helper()
	opts.SQSListen = "127.0.0.1:0"
	if opts.AMQPListen != "" {
		opts.AMQPListen = "127.0.0.1:0"
	}
	if opts.AMQPSListen != "" {
		opts.AMQPSListen = "127.0.0.1:0"
	}
	s, err := server.New(opts, log, nil)
	if err != nil {
		t.Fatalf("brokertest: start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{Server: s, Options: opts, cancel: cancel, done: make(chan struct{})}
	go func() {
		b.runErr = s.Run(ctx)
		close(b.done)
	}()
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("brokertest: run: %v", err)
		}
	})
	return b
}

// SQSURL is the base URL of the SQS API (and the admin API, metrics and
// dashboard): http://127.0.0.1:port.
func (b *Broker) SQSURL() string { return "http://" + b.Server.SQSAddr() }

// AMQPURL is the AMQP URL of the default user on vhost "/", or "" when
// the AMQP listener is off.
func (b *Broker) AMQPURL() string {
	if b.Server.AMQPAddr() == "" {
		return ""
	}
	return "amqp://guest:guest@" + b.Server.AMQPAddr() + "/"
}

// Stop stops the broker gracefully (as SIGTERM does) and waits for Run to
// return, returning Run's error. Calling it again returns the same error.
// Call it from the test's goroutine (or its cleanup), not concurrently.
func (b *Broker) Stop() error {
	if !b.stopped {
		b.stopped = true
		b.cancel()
	}
	<-b.done
	return b.runErr
}
