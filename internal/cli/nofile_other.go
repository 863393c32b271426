//go:build !unix

package cli

// fileLimit is unknown here: the connection cap takes its default for an
// unknown limit.
func fileLimit() uint64 { return 0 }
