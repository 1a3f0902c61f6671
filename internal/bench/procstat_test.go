package bench

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want time.Duration
		ok   bool
	}{
		{"plain", "4242 (sluice) S 1 4242 4242 0 -1 4194560 1933 0 0 0 250 37 0 0 20 0 9 0 123 0 0\n", 2870 * time.Millisecond, true},
		{"comm with spaces and parens", "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5\n", 30 * time.Millisecond, true},
		{"no comm", "7 sluice R 1", 0, false},
		{"short", "7 (x) R 1 2 3", 0, false},
		{"not a number", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 a 2 0", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tt.in))
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("parseProcStat = %v, %v; want %v, ok=%t", got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestProcCPUSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	before, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the tick-granular counter moves: polling, with a bound.
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		after, err := ProcCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %v for 10 s of busy loop (x=%d)", before, x)
		}
	}
	if _, err := ProcCPU(-1); err == nil {
		t.Fatal("ProcCPU(-1) succeeded")
	}
}

func TestParseMachineStat(t *testing.T) {
	in := "cpu  100 5 50 9000 40 3 2 10 7 0\ncpu0 50 2 25 4500 20 1 1 5 3 0\n"
	got, err := parseMachineStat([]byte(in))
	if want := 170 * 10 * time.Millisecond; err != nil || got != want {
		t.Fatalf("parseMachineStat = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 x 4 5 6 7 8\n"} {
		if _, err := parseMachineStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestCPUUseJSON: both results inline CPUUse's fields last, under the names
// and in the order the two result types wrote out before they shared it.
func TestCPUUseJSON(t *testing.T) {
	u := CPUUse{ServerCPU: 1, ServerCPUPer100k: 2, ClientCPU: 3, ClientCPUPer100k: 4, MachineCPU: 5, OtherCPU: 6}
	const tail = `"server_cpu_ns":1,"server_cpu_s_per_100k":2,"client_cpu_ns":3,"client_cpu_s_per_100k":4,"machine_cpu_ns":5,"other_cpu_ns":6}`
	for _, v := range []any{SQSResult{CPUUse: u}, AMQPResult{CPUUse: u}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(string(b), tail) {
			t.Errorf("%T: %s\ndoes not end with %s", v, b, tail)
		}
	}
}

// TestWriteResult: --json writes the result as indented JSON that reads
// back; otherwise the table.
func TestWriteResult(t *testing.T) {
	for _, res := range []interface{ WriteTable(io.Writer) }{&SQSResult{Sent: 3}, &AMQPResult{Published: 3}} {
		var js, table strings.Builder
		if err := writeResult(&js, true, res); err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		if err := json.Unmarshal([]byte(js.String()), &back); err != nil || !strings.Contains(js.String(), "\n  \"") {
			t.Errorf("%T: not indented JSON (%v):\n%s", res, err, js.String())
		}
		if err := writeResult(&table, false, res); err != nil || strings.HasPrefix(table.String(), "{") || table.Len() == 0 {
			t.Errorf("%T: table %q, %v", res, table.String(), err)
		}
	}
}
