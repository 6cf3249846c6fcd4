package dedupcmp_test

import "syscall"

// cpuTime is the CPU time the process has used, in nanoseconds (user and system,
// every thread, the collector's too).
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
