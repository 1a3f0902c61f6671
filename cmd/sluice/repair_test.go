package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/server"
	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// TestRepairCommand (issue #10, hole 8): a broker whose store holds a
// record recovery cannot explain refuses to start and names the repair
// command; `sluice repair --dry-run` lists the record and changes nothing;
// `sluice repair` drops it; the broker then starts.
func TestRepairCommand(t *testing.T) {
	dir := t.TempDir()
	opts := server.DefaultOptions()
	opts.DataDir, opts.SQSListen, opts.AMQPListen = dir, "127.0.0.1:0", ""
	s, err := server.New(opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	st, err := pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	b.Set([]byte("M\x00\x00\x00\x63\x00\x00\x00\x00\x00\x00\x00\x01\x00"), []byte{1}) // queue id 99: never allocated
	if p, err := st.Write(&b, true); err != nil || p.Wait() != nil {
		t.Fatal(err)
	}
	st.Close()

	if _, err := server.New(opts, nil, nil); !errors.Is(err, engine.ErrNeedsRepair) || !strings.Contains(err.Error(), "sluice repair") {
		t.Fatalf("start with an unexplained record: %v", err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"repair", "--data-dir", dir, "--dry-run"}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "would drop: record of queue id 99") || !strings.Contains(out.String(), "nothing was changed") {
		t.Fatalf("dry run: %d %q %q", code, out.String(), errb.String())
	}
	if _, err := server.New(opts, nil, nil); !errors.Is(err, engine.ErrNeedsRepair) {
		t.Fatalf("a dry run changed the store: %v", err)
	}
	out.Reset()
	if code := run([]string{"repair", "--data-dir", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "dropped: record of queue id 99") {
		t.Fatalf("repair: %d %q %q", code, out.String(), errb.String())
	}
	s, err = server.New(opts, nil, nil)
	if err != nil {
		t.Fatalf("start after repair: %v", err)
	}
	s.Close()
	if code := run([]string{"repair", "--data-dir", t.TempDir() + "/missing"}, &out, &errb); code != 1 {
		t.Fatalf("repair of a missing dir: %d", code)
	}
}
