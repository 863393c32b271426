package baseline

import (
	"os"
	"syscall"
)

// Fdatasync makes what was written to f durable, as a database's write-ahead
// log does: fdatasync(2), which leaves out metadata a read does not need.
func Fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
