package task

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"sync"
	"time"
)

// ID identifies a task. It is 16 bytes: a 48-bit creation time in Unix
// milliseconds, a 16-bit shard number (0 on a single node) and 64 bits that
// are random for the first id of a millisecond and counted up from there, so
// ids made by one generator sort by creation.
//
// Its text form is 26 characters of Crockford base32 (as in ULID), which
// sort the same way as the bytes.
type ID [16]byte

// ErrBadID is returned by [ParseID] for text that is not a task id.
var ErrBadID = errors.New("toc: malformed task id")

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

var crockfordDec = func() (d [256]byte) {
	for i := range d {
		d[i] = 0xFF
	}
	for i := 0; i < len(crockford); i++ {
		d[crockford[i]] = byte(i)
		d[crockford[i]|0x20] = byte(i) // lower case
	}
	return d
}()

// String returns the 26-character text form.
func (id ID) String() string {
	out := id.text()
	return string(out[:])
}

// AppendText implements encoding.TextAppender: b with the text form
// appended, without a string of its own.
func (id ID) AppendText(b []byte) ([]byte, error) { return appendID(b, id), nil }

func (id ID) text() (out [26]byte) {
	// 128 bits as 26 groups of 5 bits, the first group holding the top 3 bits.
	hi := binary.BigEndian.Uint64(id[:8])
	lo := binary.BigEndian.Uint64(id[8:])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return out
}

// MarshalText implements encoding.TextMarshaler.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *ID) UnmarshalText(b []byte) error {
	p, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// ParseID parses the text form of an id, in either case.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 26 {
		return id, ErrBadID
	}
	if crockfordDec[s[0]] > 7 { // only 3 bits fit in the first character
		return id, ErrBadID
	}
	var hi, lo uint64
	for i := 0; i < 26; i++ {
		v := crockfordDec[s[i]]
		if v == 0xFF {
			return id, ErrBadID
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(v)
	}
	binary.BigEndian.PutUint64(id[:8], hi)
	binary.BigEndian.PutUint64(id[8:], lo)
	return id, nil
}

// IsZero reports whether id is the zero id, which no task has.
func (id ID) IsZero() bool { return id == ID{} }

// Time returns the creation time encoded in the id.
func (id ID) Time() time.Time {
	ms := int64(binary.BigEndian.Uint64(id[:8]) >> 16)
	return time.UnixMilli(ms)
}

// Shard returns the shard number encoded in the id (0 on a single node).
func (id ID) Shard() uint16 { return binary.BigEndian.Uint16(id[6:8]) }

// WithShard returns id with its shard number set to shard.
func (id ID) WithShard(shard uint16) ID {
	binary.BigEndian.PutUint16(id[6:8], shard)
	return id
}

// IDGenerator makes ids that sort by creation. The zero value is ready to use
// and safe for concurrent use.
type IDGenerator struct {
	mu     sync.Mutex
	lastMS int64
	seq    uint64
}

// New returns a new id made at now for the given shard.
func (g *IDGenerator) New(now time.Time, shard uint16) ID {
	ms := now.UnixMilli()
	g.mu.Lock()
	if ms <= g.lastMS {
		// Same millisecond (or the clock stepped back): count up so ids
		// stay ordered and unique.
		ms = g.lastMS
		g.seq++
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])                     // crypto/rand.Read never fails (Go 1.24+)
		g.seq = binary.BigEndian.Uint64(b[:]) >> 1 // leave room to count up
		g.lastMS = ms
	}
	seq := g.seq
	g.mu.Unlock()

	var id ID
	binary.BigEndian.PutUint64(id[:8], uint64(ms)<<16|uint64(shard))
	binary.BigEndian.PutUint64(id[8:], seq)
	return id
}
