package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/advisor"
)

const doctorUsage = `
Usage: sluice doctor [--endpoint URL] [--json] [--all]

Check every queue's configuration against what the broker has observed
(GET /sluice/v1/advisor): visibility timeout against the p99 processing
time, maxReceiveCount, dead-letter queues (attached, not consumed, kept
longer than their sources, watched by an alert, owned), prefetch, FIFO
message groups, and messages close to their retention.

Prints one line per yellow or red finding (--all adds the green ones), worst
first, each followed by a "fix:" line naming the attribute change or the
command that resolves it. Exits 1 when any finding is red, so a deploy pipeline can gate on it.
`

// Advice is the answer of GET /sluice/v1/advisor.
type Advice struct {
	At       time.Time         `json:"at"`
	Worst    advisor.Verdict   `json:"worst"`
	Findings []advisor.Finding `json:"findings"`
	Gaps     []string          `json:"gaps"`
}

// Doctor runs `sluice doctor`.
func Doctor(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice doctor", doctorUsage)
	all := c.fs.Bool("all", false, "also print the checks that pass (green)")
	return c.run(args, 0, 0, func([]string) int {
		var a Advice
		if err := c.client().call(ctx, "GET", "advisor", nil, nil, &a); err != nil {
			var ae *APIError
			if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
				return c.fail(errors.New("this broker does not serve the advisor (GET /sluice/v1/advisor); it needs a Sluice with the dashboard"))
			}
			return c.fail(err)
		}
		code := ExitOK
		if advisor.Worst(a.Findings) == advisor.Red {
			code = ExitFail
		}
		if c.json {
			if rc := c.printJSON(a); rc != ExitOK {
				return rc
			}
			return code
		}
		rank := map[advisor.Verdict]int{advisor.Red: 0, advisor.Yellow: 1, advisor.Green: 2}
		fs := append([]advisor.Finding(nil), a.Findings...)
		sort.SliceStable(fs, func(i, j int) bool {
			if rank[fs[i].Verdict] != rank[fs[j].Verdict] {
				return rank[fs[i].Verdict] < rank[fs[j].Verdict]
			}
			if fs[i].Queue != fs[j].Queue {
				return fs[i].Queue < fs[j].Queue
			}
			return fs[i].Check < fs[j].Check
		})
		counts := map[advisor.Verdict]int{}
		t := newTable(c.env.Stdout, "VERDICT", "QUEUE", "CHECK", "REASON")
		shown := 0
		for _, f := range fs {
			counts[f.Verdict]++
			if f.Verdict == advisor.Green && !*all {
				continue
			}
			t.row(strings.ToUpper(string(f.Verdict)), f.Queue, f.Check, f.Reason)
			if f.Fix != "" {
				t.row("", "", "", "fix: "+f.Fix)
			}
			shown++
		}
		if shown > 0 {
			t.flush()
		} else {
			fmt.Fprintln(c.env.Stdout, "No problems found.")
		}
		fmt.Fprintf(c.env.Stdout, "\n%d red, %d yellow, %d green\n", counts[advisor.Red], counts[advisor.Yellow], counts[advisor.Green])
		for _, g := range a.Gaps {
			fmt.Fprintf(c.env.Stdout, "not checked: %s\n", g)
		}
		return code
	})
}
