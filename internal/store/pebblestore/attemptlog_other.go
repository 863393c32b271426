//go:build !linux

package pebblestore

import (
	"github.com/cockroachdb/pebble/v2/vfs"
)

// mapNotes maps the attempt log on Linux only (fallocate keeps a full disk
// from faulting a store into the mapping): elsewhere notes are appended by
// write(2).
func mapNotes(vfs.File, int64) ([]byte, error) {
	return nil, errNoMap
}

func unmapNotes([]byte) error { return nil }
