package cli

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/engine"
)

// --rate 0 and an unknown --reason are mistakes, said as such; the API
// refuses an unknown reason too, listing the valid ones.
func TestRateZeroAndUnknownReason(t *testing.T) {
	f := newFixture(t)
	f.poison(2, "KeyError")
	wantExit(t, f.dlq("", "redrive", "dlq", "--rate", "0"), ExitUsage, "--rate must be between 1 and 500")
	wantExit(t, f.dlq("", "redrive", "dlq", "--rate", "501"), ExitUsage, "--rate must be between 1 and 500")
	wantExit(t, f.dlq("", "peek", "dlq", "--reason", "poison"), ExitUsage, `unknown --reason "poison": one of max_receives, terminal, expired, maxlen, delivery_limit`)
	resp, err := http.Get(f.url + "/sluice/v1/queues/dlq/messages?reason=poison")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "max_receives, terminal") {
		t.Fatalf("API: %d %s", resp.StatusCode, body)
	}
	if info, _ := f.eng.GetQueue("dlq"); info.Visible != 2 {
		t.Fatalf("a refused command changed the DLQ: %+v", info)
	}
}

// sluice queues peek browses any queue, not only dead-letter queues.
func TestQueuesPeek(t *testing.T) {
	f := newFixture(t)
	res, err := f.eng.Send("other", []engine.Message{{Body: []byte("hello")}})
	if err != nil {
		t.Fatal(err)
	}
	r := f.run(Queues, "", "peek", "other")
	wantOK(t, r, res[0].MessageID)
	page := decode[api.Page](t, f.run(Queues, "", "peek", "other", "--json"))
	if len(page.Messages) != 1 || page.Messages[0].ReceiveCount != 0 {
		t.Fatalf("peek changed the message or missed it: %+v", page)
	}
	wantExit(t, f.run(Queues, "", "peek"), ExitUsage, "missing argument")
}

// Message ids accept a unique prefix; an ambiguous one lists the matches.
func TestMessageIDPrefixes(t *testing.T) {
	f := newFixture(t)
	ids := f.poison(20, "KeyError") // 20 ids, 16 hex digits: two share a first character
	wantOK(t, f.dlq("", "show", "dlq", ids[3][:8]), "id:", ids[3])
	byFirst := map[byte][]string{}
	for _, id := range ids {
		byFirst[id[0]] = append(byFirst[id[0]], id)
	}
	for c, same := range byFirst {
		if len(same) < 2 {
			continue
		}
		r := f.dlq("", "show", "dlq", string(c))
		wantExit(t, r, ExitFail, "is ambiguous in dlq")
		if !strings.Contains(r.stderr, same[0]) || !strings.Contains(r.stderr, same[1]) {
			t.Fatalf("ambiguity does not list the matches: %q", r.stderr)
		}
		break
	}
	wantExit(t, f.dlq("", "show", "dlq", "zz"), ExitFail, `no message in dlq has an id starting with "zz"`)
	wantOK(t, f.dlq("", "delete", "dlq", ids[5][:10]), "deleted 1 message(s) from dlq")
	if info, _ := f.eng.GetQueue("dlq"); info.Visible != 19 {
		t.Fatalf("delete by prefix: %+v", info)
	}
}

// A paused task names its state in errors; resume --wait carries on from
// the moved count it had (plain lines in a pipe, a bar on a terminal);
// dlq tasks without a queue lists every queue's tasks.
func TestPauseResumeContinues(t *testing.T) {
	f := newFixture(t)
	f.poison(40, "KeyError")
	tk := decode[api.Task](t, f.dlq("", "redrive", "dlq", "--rate", "20", "--json"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		cur, err := f.eng.GetMoveTask(tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cur.Moved > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the task moved nothing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	paused := decode[api.Task](t, f.dlq("", "pause", tk.ID, "--json"))
	if paused.Status != engine.TaskPaused || paused.Moved == 0 {
		t.Fatalf("pause: %+v", paused)
	}
	r := f.dlq("", "pause", tk.ID)
	wantExit(t, r, ExitFail, "task is PAUSED; resume it with `sluice dlq resume "+tk.ID+"`")

	wantOK(t, f.dlq("", "tasks"), tk.ID, "dlq", "PAUSED")

	f.terminal = true
	r = f.dlq("", "resume", tk.ID, "--wait")
	wantOK(t, r, "completed: moved 40 message(s)")
	if !strings.Contains(r.stderr, "\r[") || !strings.Contains(r.stderr, "40/40 100%  COMPLETED") {
		t.Fatalf("no progress bar on a terminal: %q", r.stderr)
	}
	// The first bar drawn after the resume starts at least where the
	// pause left it, not at zero.
	first := strings.SplitN(strings.TrimPrefix(r.stderr, "\r"), "\r", 2)[0]
	if strings.Contains(first, "] 0/40") {
		t.Fatalf("resume restarted the count: %q", first)
	}
	r = f.dlq("", "resume", tk.ID)
	wantExit(t, r, ExitFail, "task is COMPLETED and has ended (moved 40 of 40); start a new one with `sluice dlq redrive dlq`")
}

// --id filters take unique prefixes too.
func TestIDFilterPrefixes(t *testing.T) {
	f := newFixture(t)
	ids := f.poison(3, "KeyError")
	page := decode[api.Page](t, f.dlq("", "peek", "dlq", "--id", ids[1][:13], "--json"))
	if len(page.Messages) != 1 || page.Messages[0].ID != ids[1] {
		t.Fatalf("peek --id prefix: %+v", page)
	}
	wantOK(t, f.dlq("", "delete", "dlq", "--id", ids[2][:13]), "deleted 1 message(s) from dlq")
	wantExit(t, f.dlq("", "peek", "dlq", "--id", "zzzz"), ExitFail, `--id: no message in dlq has an id starting with "zzzz"`)
}

// Starting a redrive while one is active names the active task, its state
// and the commands that apply.
func TestRedriveWhileActiveNamesTheTask(t *testing.T) {
	f := newFixture(t)
	f.poison(30, "KeyError")
	tk := decode[api.Task](t, f.dlq("", "redrive", "dlq", "--rate", "1", "--json"))
	wantOK(t, f.dlq("", "pause", tk.ID), "PAUSED")
	r := f.dlq("", "redrive", "dlq")
	wantExit(t, r, ExitFail, "dlq already has an active redrive: cannot start another: task is PAUSED; resume it with `sluice dlq resume "+tk.ID+"`")
}
