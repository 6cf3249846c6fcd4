package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the server die with the test process: a test binary that
// panics or times out runs no Cleanup, and a cluster left running would gossip
// into the next run's nodes on reused ports.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
