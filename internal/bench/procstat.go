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

// MachineCPU returns the CPU time all processors have spent busy (user,
// nice, system, irq, softirq, steal) since boot, from /proc/stat. Compared
// with the broker's and the load generator's own CPU it shows how much of
// the machine something else used during a run.
func MachineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: read machine cpu: %w", err)
	}
	return parseMachineStat(b)
}

// parseMachineStat reads the aggregate "cpu" line of /proc/stat:
//
//	cpu  user nice system idle iowait irq softirq steal guest guest_nice
//
// guest time is already included in user, so it is not added.
func parseMachineStat(b []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	fields := bytes.Fields(line)
	if len(fields) < 9 || string(fields[0]) != "cpu" {
		return 0, fmt.Errorf("bench: /proc/stat: unexpected first line %q", truncate(line))
	}
	var ticks uint64
	for i, f := range fields[1:9] {
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc/stat: %w", err)
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		ticks += v
	}
	return time.Duration(ticks) * (time.Second / clockTicks), nil
}
