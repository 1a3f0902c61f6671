package brokertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func client(b *Broker) *sqs.Client {
	return sqs.New(sqs.Options{BaseEndpoint: aws.String(b.SQSURL()), Region: "us-east-1", RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")})
}

// sendOne creates queue q and sends body to it; the send is acknowledged,
// so it is synced.
func sendOne(t *testing.T, b *Broker, q, body string) {
	t.Helper()
	ctx := context.Background()
	out, err := client(b).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(q)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client(b).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: out.QueueUrl, MessageBody: aws.String(body)}); err != nil {
		t.Fatal(err)
	}
}

// receiveOne receives from q on the broker's current URL and returns the
// body ("" when the queue is empty).
func receiveOne(t *testing.T, b *Broker, q string) string {
	t.Helper()
	ctx := context.Background()
	u, err := client(b).GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := client(b).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: u.QueueUrl})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) == 0 {
		return ""
	}
	return aws.ToString(out.Messages[0].Body)
}

// TestRestart: after Restart the broker serves the same data (a queue and
// an acknowledged message) through the new Server and URLs, and the
// test's cleanup stops the new broker.
func TestRestart(t *testing.T) {
	b := Start(t, Options(t), nil)
	sendOne(t, b, "q", "kept")
	old := b.Server
	b.Restart()
	if b.Server == old {
		t.Fatal("Restart kept the old server")
	}
	if got := receiveOne(t, b, "q"); got != "kept" {
		t.Fatalf("after the restart received %q, want %q", got, "kept")
	}
}

// TestCrash: Crash starts the broker again on a crash clone of its store's
// filesystem: an acknowledged (synced) message is there, a file written
// without a sync is not; a graceful Restart keeps that file.
func TestCrash(t *testing.T) {
	b := Start(t, CrashOptions(t), nil)
	sendOne(t, b, "q", "synced")
	// unsynced writes a file without syncing it or its directory.
	unsynced := func(name string) {
		t.Helper()
		f, err := b.Options.StoreFS.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("lost at a power cut")); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// kept reports whether the file name holds what unsynced wrote.
	kept := func(name string) bool {
		t.Helper()
		f, err := b.Options.StoreFS.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		data, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(data) == "lost at a power cut"
	}
	unsynced("before-restart")
	b.Restart()
	if !kept("before-restart") {
		t.Fatal("a graceful restart lost a file of the filesystem")
	}
	unsynced("before-crash")
	b.Crash()
	if kept("before-crash") {
		t.Fatal("Crash kept a file that was never synced: the power was not cut")
	}
	if got := receiveOne(t, b, "q"); got != "synced" {
		t.Fatalf("after the crash received %q, want %q", got, "synced")
	}
}

// TestCrashNeedsCrashOptions: Crash on a broker whose store is on the
// operating system's filesystem fails the test, saying what to do.
func TestCrashNeedsCrashOptions(t *testing.T) {
	b := Start(t, Options(t), nil)
	ft := &fatalT{TB: t}
	b.t = ft
	func() {
		defer func() {
			if r := recover(); r != nil && r != ft {
				panic(r)
			}
		}()
		b.Crash()
	}()
	b.t = t
	if ft.msg == "" {
		t.Fatal("Crash on a broker without CrashOptions did not fail the test")
	}
}

// fatalT records a Fatalf and ends the call with a panic of itself,
// instead of ending the test.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}
