//go:build unix

package loadgen

import (
	"io/fs"
	"syscall"
)

// allocated is the space a file takes on disk: its blocks, of 512 bytes.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return info.Size()
}
