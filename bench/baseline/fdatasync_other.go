//go:build !linux

package baseline

import "os"

// Fdatasync makes what was written to f durable: an fsync where fdatasync(2)
// is not available.
func Fdatasync(f *os.File) error { return f.Sync() }
