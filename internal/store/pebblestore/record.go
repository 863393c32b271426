package pebblestore

import "github.com/toc-dev/toc/internal/store/record"

// Tasks are stored in the format every backend shares.
var (
	encodeRecord = record.Encode
	decodeRecord = record.Decode
	normalize    = record.Normalize
)
