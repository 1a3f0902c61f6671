package brokertest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// ReservePorts returns n distinct free addresses on 127.0.0.1. It is for
// the one case where port 0 cannot be passed on: the members of a cluster
// must know each other's Raft addresses before any of them starts, and a
// node restarted after a crash must come back on the same one.
//
// The ports are chosen at random below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range) and checked by binding them.
// A port from the ephemeral range, which is what binding port 0 hands out,
// is a poor reservation: once it is closed, the kernel may give it to any
// outgoing connection or port-0 listener on the machine before the node
// binds it (CI saw "address already in use" that way). Ports below the
// range are never handed out by the kernel, so only another caller of
// ReservePorts picking the same random port at the same moment could take
// one, and the check-by-binding makes even that need two tests to race.
func ReservePorts(t testing.TB, n int) []string {
	t.Helper()
	return NewPorts(t).Reserve(n)
}

// ReservePortBlocks returns the first addresses of n blocks of size
// consecutive free ports on 127.0.0.1, no two blocks overlapping, chosen
// and checked as ReservePorts chooses and checks its ports: for a cluster
// node with shards, which listens on a configured port plus the shard's
// number.
func ReservePortBlocks(t testing.TB, n, size int) []string {
	t.Helper()
	return NewPorts(t).Blocks(n, size)
}

// Ports reserves ports as ReservePorts does, never one it reserved
// before. A test that reserves in several steps (its nodes' Raft
// addresses, then blocks of internal ports) takes them all from one
// Ports: each step checks its ports by binding them, and the ports of an
// earlier step are closed again by then, so separate calls of
// ReservePorts and ReservePortBlocks can hand out the same port twice
// (CI's fault harness once had a node's Raft port inside another node's
// block of internal ports: "bind: address already in use").
type Ports struct {
	t     testing.TB
	taken map[int]bool
}

// NewPorts returns a Ports for t with nothing reserved yet.
func NewPorts(t testing.TB) *Ports { return &Ports{t: t, taken: map[int]bool{}} }

// Reserve is ReservePorts, clear of every port p reserved before.
func (p *Ports) Reserve(n int) []string {
	p.t.Helper()
	return p.Blocks(n, 1)
}

// Blocks is ReservePortBlocks, clear of every port p reserved before.
func (p *Ports) Blocks(n, size int) []string {
	p.t.Helper()
	lo, hi := reservableRange()
	out := make([]string, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries > 10000 {
			p.t.Fatalf("ReservePortBlocks: no %d free consecutive ports in [%d, %d) after %d tries", size, lo, hi, tries)
		}
		base := lo + rand.IntN(hi-lo-size)
		free := true
		for port := base; port < base+size && free; port++ {
			if p.taken[port] {
				free = false
				break
			}
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			if err := ln.Close(); err != nil {
				p.t.Fatal(err)
			}
		}
		if !free {
			continue
		}
		for port := base; port < base+size; port++ {
			p.taken[port] = true
		}
		out = append(out, net.JoinHostPort("127.0.0.1", strconv.Itoa(base)))
	}
	return out
}

// reservableRange is [lo, hi): ports below the ephemeral range and above
// the well-known and registered ones most services listen on. If the
// ephemeral range cannot be read, Linux's default is assumed.
func reservableRange() (lo, hi int) {
	lo, hi = 15000, 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	var eLo, eHi int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &eLo, &eHi); err != nil || eLo <= lo+1000 {
		return lo, hi
	}
	return lo, eLo
}
