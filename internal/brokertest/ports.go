package brokertest

import (
	"net"
	"testing"
)

// ReservePorts binds n ports on 127.0.0.1:0 and closes them again, and
// returns their addresses. It is for the one case where port 0 cannot be
// passed on: the members of a cluster must know each other's Raft
// addresses before any of them starts. (Another process could take a port
// in between; on a test machine that is rare and fails loudly at start.)
func ReservePorts(t testing.TB, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out[i] = ln.Addr().String()
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
