package faults

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluicemq/sluice/test/crash"
)

// walBlock is pebble's WAL block size: the torn-tail rule never checks a
// bad chunk in the newest WAL's last block against what follows it (see
// docs/adr/0001-storage-engine.md), so the flip goes well before it.
const walBlock = 32 << 10

// TestBitFlipInWAL sends acknowledged messages to the real broker until
// its newest WAL spans several 32 KiB blocks, kills it with SIGKILL, flips
// one bit in the middle of that WAL, and restarts it: the broker must
// refuse to start, with an error that names the file, rather than skip the
// damaged record and everything after it. Restoring the bit must bring
// every acknowledged message back.
//
// Torn tails (a last record cut short by the crash) are covered at the
// store level by internal/store/pebblestore/torn_test.go (TestTornTail and
// the corruption cases next to it).
func TestBitFlipInWAL(t *testing.T) {
	budget(t, 0) // skipped under -short
	bin := binary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := newWorkload(false, "flip", 10*time.Second)
	srv, err := crash.Start(ctx, bin, dir, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	client := newClient(srv.URL(), 10*time.Second)
	if err := w.CreateQueues(ctx, client); err != nil {
		_ = srv.Kill()
		t.Fatal(err)
	}
	inc, err := w.connect(ctx, srv)
	if err != nil {
		_ = srv.Kill()
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	acked := 0
	body := strings.Repeat("x", 900)
	for {
		wal, size := newestWAL(t, data)
		if size >= 6*walBlock {
			t.Logf("newest WAL %s is %d bytes after %d acknowledged messages", filepath.Base(wal), size, acked)
			break
		}
		entries := make([]types.SendMessageBatchRequestEntry, 10)
		for i := range entries {
			entries[i] = types.SendMessageBatchRequestEntry{Id: ptr(strconv.Itoa(i)), MessageBody: ptr(strconv.Itoa(acked+i) + body)}
		}
		out, err := inc.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: ptr(inc.urls[w.Main]), Entries: entries})
		if err != nil {
			_ = srv.Kill()
			t.Fatal(err)
		}
		acked += len(out.Successful)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}

	wal, size := newestWAL(t, data)
	off := (size/2)/walBlock*walBlock + 1000 // inside a chunk, blocks before the end
	orig := flip(t, wal, off, 0x10)
	t.Logf("flipped bit 4 of byte %d of %s (%d bytes)", off, filepath.Base(wal), size)

	if bad, err := crash.Start(ctx, bin, dir, 30*time.Second); err == nil {
		_ = bad.Kill()
		t.Fatalf("the broker started on a WAL with a flipped bit in acknowledged data\n%s", crash.Tail(dir))
	} else {
		msg := err.Error()
		if !strings.Contains(msg, filepath.Base(wal)) || !strings.Contains(strings.ToLower(msg), "corrupt") {
			t.Fatalf("the refusal does not name the corrupt file %s:\n%v", filepath.Base(wal), err)
		}
		for _, line := range strings.Split(msg, "\n") {
			if strings.Contains(line, filepath.Base(wal)) {
				t.Logf("refused to start: %s", line[:min(len(line), 400)])
				break
			}
		}
	}

	flip(t, wal, off, 0x10) // restore
	if b := readByte(t, wal, off); b != orig {
		t.Fatalf("byte not restored")
	}
	srv2, err := crash.Start(ctx, bin, dir, 60*time.Second)
	if err != nil {
		t.Fatalf("restart with the bit restored: %v", err)
	}
	defer func() { _ = srv2.Stop(10 * time.Second) }()
	c2 := newClient(srv2.URL(), 10*time.Second)
	out, err := c2.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: ptr(strings.Replace(inc.urls[w.Main], srv.Addr, srv2.Addr, 1)),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(out.Attributes["ApproximateNumberOfMessages"]); n < acked {
		t.Fatalf("after restoring the bit: %d messages, %d were acknowledged", n, acked)
	}
}

// newestWAL returns the highest-numbered *.log in dir and its size.
func newestWAL(t *testing.T, dir string) (string, int64) {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no WAL in %s: %v", dir, err)
	}
	sort.Strings(logs)
	fi, err := os.Stat(logs[len(logs)-1])
	if err != nil {
		t.Fatal(err)
	}
	return logs[len(logs)-1], fi.Size()
}

func readByte(t *testing.T, path string, off int64) byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b[0]
}

// flip XORs the byte at off with mask and returns its old value.
func flip(t *testing.T, path string, off int64, mask byte) byte {
	t.Helper()
	old := readByte(t, path, off)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{old ^ mask}, off); err != nil {
		t.Fatal(err)
	}
	return old
}
