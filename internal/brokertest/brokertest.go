// Package brokertest starts real Sluice brokers for tests: server.New and
// Server.Run, exactly as `sluice server` runs them, with a t.TempDir() data
// directory and every listener on 127.0.0.1:0. Tests then drive the broker
// with real clients (aws-sdk-go-v2, amqp091-go, boto3) through SQSURL and
// AMQPURL, and can restart it gracefully (Restart) or cut its power
// (Crash, for a broker started from CrashOptions).
//
// Tests wait for conditions with the subpackage poll (CheckFor,
// AdvanceUntil, Parked), never by sleeping a fixed time.
//
// It replaces the start-a-server helper each test package used to write for
// itself. Only test code imports it.
package brokertest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/brokertest/crashfs"
	"github.com/sluicemq/sluice/internal/server"
)

// Broker is one running broker. Stop it with Stop, or let the test's
// cleanup stop it. Restart and Crash replace the running server with a
// new one over the same data; Server and the URLs then name the new one.
type Broker struct {
	// Server is the running server (its Engine, addresses, counters).
	Server *server.Server
	// Options are the options it was started with, after Start forced its
	// listeners onto 127.0.0.1:0.
	Options server.Options

	t       testing.TB
	log     *slog.Logger
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

// CrashOptions is Options with the disk store on an in-memory filesystem
// that can simulate a power cut (crashfs, as the power-loss tests of
// test/faults use): a broker started from them can
// Crash. The data directory is "db" inside that filesystem; the free-disk
// watch is off, as for any Options.StoreFS.
func CrashOptions(t testing.TB) server.Options {
	t.Helper()
	o := Options(t)
	o.DataDir, o.StoreFS = "db", crashfs.New()
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
	b := &Broker{Options: opts, t: t, log: log}
	b.start()
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("brokertest: run: %v", err)
		}
	})
	return b
}

// start starts a server with b.Options and runs it.
func (b *Broker) start() {
	b.t.Helper()
	s, err := server.New(b.Options, b.log, nil)
	if err != nil {
		b.t.Fatalf("brokertest: start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.Server, b.cancel, b.done, b.runErr, b.stopped = s, cancel, done, nil, false
	go func() {
		b.runErr = s.Run(ctx)
		close(done)
	}()
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

// Restart stops the broker gracefully, as Stop does (failing the test if
// Run returned an error), and starts a new one with the same Options: the
// same data directory (or StoreFS), its listeners on new ports. What the
// broker acknowledged and what it flushed at shutdown is there again;
// clients of the old broker must connect to the new URLs.
//
// With Store "memory" nothing survives, as with `sluice server`.
func (b *Broker) Restart() {
	b.t.Helper()
	if err := b.Stop(); err != nil {
		b.t.Fatalf("brokertest: restart: the broker being stopped: %v", err)
	}
	b.start()
}

// Crash cuts the broker's power and starts it again: the new broker opens
// a crash clone of the store's filesystem, which holds only what had been
// synced when Crash was called (crashfs.FS.CrashClone), on new ports,
// as it would find its disk after a power cut. Nothing is flushed for it;
// recovery runs as after a real crash. The broker must have been started
// from CrashOptions, or Crash fails the test.
//
// The old server is then stopped so that it does not outlive the test; it
// goes on writing to the old filesystem, which nothing reads again. Its
// clients see their connections closed rather than reset, and must connect
// to the new URLs.
func (b *Broker) Crash() {
	b.t.Helper()
	mem, ok := b.Options.StoreFS.(crashfs.FS)
	if !ok || b.Options.Store == "memory" {
		b.t.Fatalf("brokertest: Crash needs a disk store on a crashable filesystem: start the broker from CrashOptions")
	}
	b.Options.StoreFS = mem.CrashClone(vfs.CrashCloneCfg{})
	if err := b.Stop(); err != nil {
		b.t.Logf("brokertest: crash: the abandoned broker's run: %v", err)
	}
	b.start()
}
