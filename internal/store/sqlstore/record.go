package sqlstore

import "github.com/toc-dev/toc/internal/store/record"

// The record column holds the whole task in the format every backend shares
// (package record), so a task reads back the same from either store. The
// other columns are copies of the fields the indexes need.
var (
	encodeRecord = record.Encode
	decodeRecord = record.Decode
	normalize    = record.Normalize
)
