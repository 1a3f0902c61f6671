package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The lines both load tools print after their own counters.

// namedLatency is one latency line of a report.
type namedLatency struct {
	name string
	s    LatencySummary
}

func printLatencies(w io.Writer, ls ...namedLatency) {
	for _, l := range ls {
		fmt.Fprintf(w, "  %-12s p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  mean %s\n", l.name,
			fmtDur(l.s.P50), fmtDur(l.s.P90), fmtDur(l.s.P99), fmtDur(l.s.P999), fmtDur(l.s.Max), fmtDur(l.s.Mean))
	}
}

// writeResult writes a run's result to out: indented JSON, or the
// human-readable table.
func writeResult(out io.Writer, asJSON bool, res interface{ WriteTable(io.Writer) }) error {
	if !asJSON {
		res.WriteTable(out)
		return nil
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// printCPU prints the CPU lines of a report (zero values are not printed).
func printCPU(w io.Writer, c CPUUse, elapsed time.Duration) {
	if c.ServerCPU > 0 {
		fmt.Fprintf(w, "  %-12s %8.2f s   %6.3f CPU-s per 100k messages\n", "server cpu", c.ServerCPU.Seconds(), c.ServerCPUPer100k)
	}
	if c.ClientCPU > 0 {
		fmt.Fprintf(w, "  %-12s %8.2f s   %6.3f CPU-s per 100k messages\n", "bench cpu", c.ClientCPU.Seconds(), c.ClientCPUPer100k)
	}
	if c.MachineCPU > 0 && elapsed > 0 {
		fmt.Fprintf(w, "  %-12s %8.2f s   busy on average %.2f CPUs; %.2f s not the broker's or bench's\n", "machine cpu",
			c.MachineCPU.Seconds(), c.MachineCPU.Seconds()/elapsed.Seconds(), c.OtherCPU.Seconds())
	}
}

// printErrors prints the error counts by kind, sorted, or "none".
func printErrors(w io.Writer, errs map[string]uint64) {
	if len(errs) == 0 {
		fmt.Fprintf(w, "  %-12s none\n", "errors")
		return
	}
	kinds := make([]string, 0, len(errs))
	for k := range errs {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var sb strings.Builder
	for i, k := range kinds {
		if i > 0 {
			sb.WriteString("  ")
		}
		fmt.Fprintf(&sb, "%s=%d", k, errs[k])
	}
	fmt.Fprintf(w, "  %-12s %s\n", "errors", sb.String())
}

// fmtDur prints a latency with three significant digits in µs or ms.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) + "µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + "ms"
	default:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	}
}
