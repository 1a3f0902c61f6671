//go:build !linux

package crash

import "syscall"

// childAttr: elsewhere a started broker outlives a test binary killed from
// outside; a normal test end stops it.
func childAttr() *syscall.SysProcAttr { return nil }
