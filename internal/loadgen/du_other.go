//go:build !unix

package loadgen

import "io/fs"

// allocated is the space a file takes on disk; here, its size.
func allocated(info fs.FileInfo) int64 { return info.Size() }
