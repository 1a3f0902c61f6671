package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. The
// kernel reports these in USER_HZ, which is 100 on every architecture Linux
// exports to user space (x86, arm64, riscv, …); reading it via sysconf would
// need cgo.
const clockTicks = 100

// ProcCPU returns the user+system CPU time the process has used, from
// /proc/PID/stat (all threads, not its waited-for children).
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: read cpu of pid %d: %w", pid, err)
	}
	return parseProcStat(b)
}

// parseProcStat extracts utime+stime from the contents of /proc/PID/stat:
//
//	pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime …
//
// comm may itself hold spaces and parentheses, so the fields are counted
// from the last ')'.
func parseProcStat(b []byte) (time.Duration, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0, fmt.Errorf("bench: /proc stat: no ')' in %q", truncate(b))
	}
	fields := bytes.Fields(b[end+1:])
	// fields[0] is state (field 3), so utime (field 14) is fields[11].
	if len(fields) < 13 {
		return 0, fmt.Errorf("bench: /proc stat: %d fields after comm, want >= 13", len(fields))
	}
	var ticks uint64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc stat: %w", err)
		}
		ticks += v
	}
	return time.Duration(ticks) * (time.Second / clockTicks), nil
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
