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

// CPUUse is a run's CPU time, in both load tools' results (its JSON
// fields are inlined there).
type CPUUse struct {
	// ServerCPU is the broker's utime+stime during the run (with -pid);
	// ServerCPUPer100k is that in seconds per 100,000 messages (deleted
	// for SQS, or sent when it has no consumers; acked for AMQP).
	ServerCPU        time.Duration `json:"server_cpu_ns,omitempty"`
	ServerCPUPer100k float64       `json:"server_cpu_s_per_100k,omitempty"`
	// ClientCPU is the load generator's own CPU time, to judge how much of
	// the machine the measurement took.
	ClientCPU        time.Duration `json:"client_cpu_ns,omitempty"`
	ClientCPUPer100k float64       `json:"client_cpu_s_per_100k,omitempty"`
	// MachineCPU is the busy time of all CPUs during the run and OtherCPU
	// what is left of it after the broker (with -pid) and the load
	// generator: other processes, and the kernel work not charged to
	// either. A large OtherCPU means the figures are disturbed.
	MachineCPU time.Duration `json:"machine_cpu_ns,omitempty"`
	OtherCPU   time.Duration `json:"other_cpu_ns,omitempty"`
}

// cpuMeter holds the CPU readings taken when a run starts.
type cpuMeter struct {
	pid                      int
	server0, self0, machine0 time.Duration
	selfErr, machineErr      error
}

// startCPU takes the start readings: the broker's (pid > 0), this
// process's and the machine's. Only the broker's must be readable, since
// the run was asked to report it; the others are left out of the result
// when they cannot be read.
func startCPU(pid int) (cpuMeter, error) {
	m := cpuMeter{pid: pid}
	if pid > 0 {
		var err error
		if m.server0, err = ProcCPU(pid); err != nil {
			return m, err
		}
	}
	m.self0, m.selfErr = ProcCPU(os.Getpid())
	m.machine0, m.machineErr = MachineCPU()
	return m, nil
}

// stop takes the end readings and returns the run's CPUUse; n is the
// number of messages the per-100k figures divide by.
func (m cpuMeter) stop(n uint64) (CPUUse, error) {
	per100k := func(d time.Duration) float64 {
		if n == 0 {
			return 0
		}
		return d.Seconds() / float64(n) * 1e5
	}
	var u CPUUse
	if m.pid > 0 {
		cpu1, err := ProcCPU(m.pid)
		if err != nil {
			return u, err
		}
		u.ServerCPU = cpu1 - m.server0
		u.ServerCPUPer100k = per100k(u.ServerCPU)
	}
	if self1, err := ProcCPU(os.Getpid()); err == nil && m.selfErr == nil {
		u.ClientCPU = self1 - m.self0
		u.ClientCPUPer100k = per100k(u.ClientCPU)
	}
	if machine1, err := MachineCPU(); err == nil && m.machineErr == nil {
		u.MachineCPU = machine1 - m.machine0
		u.OtherCPU = max(0, u.MachineCPU-u.ServerCPU-u.ClientCPU)
	}
	return u, nil
}
