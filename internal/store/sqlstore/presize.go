package sqlstore

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgx encodes a statement's parameters into one buffer, which it starts
// at 256 bytes for each statement and grows as it appends each value: for
// a multi-row statement's arrays (a Create of 1000 tasks: 0.4 MB) that is
// a dozen growths, each a copy of all before it (memmove and growslice
// were a fifth of a node's CPU in creates of 1000). bindRows passes the
// first array of a statement presized with the bytes of them all, and
// the connections' type maps (presizeParams, on each new connection) grow
// the buffer by that much, once, before they encode it.

// presized is an array parameter (vals) with the bytes the statement's
// arrays take once encoded (size).
type presized[T any] struct {
	vals pgtype.FlatArray[T]
	size int
}

func (p presized[T]) array() any { return p.vals }
func (p presized[T]) bytes() int { return p.size }

// sizedArray is a presized of any element type.
type sizedArray interface {
	array() any
	bytes() int
}

// presize returns a, an array of columnArray's, as a presized with size.
func presize(a any, size int) any {
	switch a := a.(type) {
	case pgtype.FlatArray[[]byte]:
		return presized[[]byte]{a, size}
	case []string:
		return presized[string]{a, size}
	case []int64:
		return presized[int64]{a, size}
	case []*int64:
		return presized[*int64]{a, size}
	}
	return a
}

// arrayBytes is what a, an array of columnArray's, takes in PostgreSQL's
// binary format: a header of 20 bytes (one dimension), and each element's
// length (4 bytes) and value (a NULL integer counted as 8 bytes: at most
// that much too much).
func arrayBytes(a any) int {
	n := 20
	switch a := a.(type) {
	case pgtype.FlatArray[[]byte]:
		for _, b := range a {
			n += 4 + len(b)
		}
	case []string:
		for _, s := range a {
			n += 4 + len(s)
		}
	case []int64:
		n += 12 * len(a)
	case []*int64:
		n += 12 * len(a)
	}
	return n
}

// presizeParams makes conn's type map encode a presized: grow the buffer
// by its bytes, then encode its array as pgx does.
func presizeParams(_ context.Context, conn *pgx.Conn) error {
	presizeMap(conn.TypeMap())
	return nil
}

// presizeMap makes m encode a presized (see presizeParams).
func presizeMap(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapPresized}, m.TryWrapEncodePlanFuncs...)
}

// tryWrapPresized is a pgtype.TryWrapEncodePlanFunc: a presized is
// encoded by presizedPlan, then as its array.
func tryWrapPresized(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	p, ok := value.(sizedArray)
	if !ok {
		return nil, nil, false
	}
	return &presizedPlan{}, p.array(), true
}

// presizedPlan grows the buffer by a presized's bytes and has next (the
// plan of its array) encode the array.
type presizedPlan struct{ next pgtype.EncodePlan }

func (p *presizedPlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *presizedPlan) Encode(value any, buf []byte) ([]byte, error) {
	a := value.(sizedArray)
	return p.next.Encode(a.array(), slices.Grow(buf, a.bytes()))
}
