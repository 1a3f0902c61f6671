package crash

import "syscall"

// childAttr makes a started broker die with the test binary that started
// it: a test run killed from outside (a CI timeout, Ctrl-C on `go test`)
// must not leave sluice processes holding ports and data directories.
// Pdeathsig fires when the starting OS thread exits; the Go runtime keeps
// its threads for the process's life unless a goroutine locked to one
// exits, which no harness here does.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
