//go:build unix

package server

import "syscall"

// FileLimit is the process's limit of open files (RLIMIT_NOFILE, which the
// Go runtime raises to the hard limit at start; unlimited reads as a huge
// number); 0 when unknown.
func FileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return uint64(rl.Cur) //nolint:unconvert // int64 on some systems
}
