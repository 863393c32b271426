package pebblestore

import (
	"fmt"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// mapNotes allocates f on disk up to size bytes (fallocate: a store into
// the mapping then needs no block, and a full disk fails here rather than
// as a SIGBUS later) and maps it, shared, from its start.
func mapNotes(f vfs.File, size int64) ([]byte, error) {
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return nil, errNoMap // vfs.NewMem, in tests
	}
	if err := syscall.Fallocate(int(fd), 0, 0, size); err != nil {
		return nil, fmt.Errorf("allocate the attempt log's room: %w", err)
	}
	b, err := syscall.Mmap(int(fd), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the attempt log: %w", err)
	}
	return b, nil
}

// unmapNotes unmaps what mapNotes mapped.
func unmapNotes(b []byte) error {
	return syscall.Munmap(b)
}
