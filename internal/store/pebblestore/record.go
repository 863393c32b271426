package pebblestore

import (
	"sync"

	"github.com/toc-dev/toc/internal/store/record"
)

// Tasks are stored in the format every backend shares.
var (
	encodeRecord = record.Encode
	appendRecord = record.AppendEncode
	decodeRecord = record.Decode
	normalize    = record.Normalize
)

// recordBufs are scratch buffers for the records a batch is given: a
// pebble.Batch copies what Set is given, so each record is encoded into a
// reused buffer rather than a fresh one.
var recordBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledRecord bounds the buffers kept in recordBufs (a large payload's
// is left to the collector).
const maxPooledRecord = 64 << 10
