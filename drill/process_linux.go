package drill

import "syscall"

// sysProcAttr makes a cellserver die with the drill (a drill killed
// before its cleanup leaves no server behind).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
