//go:build !linux

package drill

import "syscall"

// sysProcAttr: only Linux can tie a child's life to its parent's.
func sysProcAttr() *syscall.SysProcAttr { return nil }
