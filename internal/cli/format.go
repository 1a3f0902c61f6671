package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// table writes aligned columns; call flush when done. It writes to the
// terminal (stdout): as with fmt.Fprint there, a failed write has no one
// left to tell, so its errors are dropped on purpose.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cols ...string) {
	for i, c := range cols {
		if i > 0 {
			_, _ = io.WriteString(t.tw, "\t")
		}
		// A tab or newline inside a value would break the columns.
		_, _ = io.WriteString(t.tw, strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(c))
	}
	_, _ = io.WriteString(t.tw, "\n")
}

func (t *table) flush() { _ = t.tw.Flush() }

// age renders seconds as a short duration: 45s, 12m30s, 3h5m, 2d4h; "-"
// for zero.
func age(seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	d := time.Duration(seconds * float64(time.Second))
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// stamp renders a time for tables: RFC 3339 to the second, UTC; "-" when
// unknown.
func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// clip shortens s to n runes, marking the cut with "…".
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// progressBar renders "[#######-------]  7/14  50%  RUNNING", a line that
// redraws itself in place with \r.
func progressBar(done, total int, status string) string {
	const width = 30
	frac := 1.0
	if total > 0 {
		frac = min(1, float64(done)/float64(total))
	}
	fill := int(frac * width)
	return fmt.Sprintf("\r[%s%s] %d/%d %3d%%  %-10s", strings.Repeat("#", fill), strings.Repeat("-", width-fill), done, total, int(frac*100), status)
}

// progressLine is the plain-text progress for pipes and logs:
// "moved 7/14 (50%) RUNNING".
func progressLine(done, total int, status string) string {
	pct := 100
	if total > 0 {
		pct = min(100, done*100/total)
	}
	return fmt.Sprintf("moved %d/%d (%d%%) %s", done, total, pct, status)
}

func itoa(n int) string { return strconv.Itoa(n) }
