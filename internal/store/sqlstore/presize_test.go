package sqlstore

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestPresizedEncode: a presized array is encoded as its array is, into a
// buffer grown once (not by repeated appends: a copy of the buffer each).
func TestPresizedEncode(t *testing.T) {
	vals := make(pgtype.FlatArray[[]byte], 1000)
	for i := range vals {
		if i%7 != 3 { // some NULLs
			vals[i] = bytes.Repeat([]byte{byte(i)}, 300)
		}
	}
	size := arrayBytes(vals)
	m := pgtype.NewMap()
	presizeMap(m)
	encode := func(v any) []byte {
		b, err := m.Encode(pgtype.ByteaArrayOID, pgtype.BinaryFormatCode, v, make([]byte, 0, 256))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	plain, sized := encode(vals), encode(presize(vals, size))
	if !bytes.Equal(plain, sized) {
		t.Fatal("a presized array is not encoded as its array")
	}
	if len(sized) != size {
		t.Errorf("arrayBytes %d, encoded %d bytes", size, len(sized))
	}
	plainAllocs := testing.AllocsPerRun(5, func() { encode(vals) })
	sizedAllocs := testing.AllocsPerRun(5, func() { encode(presize(vals, size)) })
	// Each growth of the buffer is an allocation: 256 B to 260 kB is
	// more than 10 of them.
	if sizedAllocs > plainAllocs-10 {
		t.Errorf("%.0f allocations to encode the presized array, %.0f the array", sizedAllocs, plainAllocs)
	}
}
