package httpapi

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/task"
)

// ackPlain reads the body of tasks:ack by hand when it has the plain form
// clients write: {"acks":[{"id":…,"lease":…},…]}, each ack both members
// once (in either order), strings without escapes, every id a task id.
// Anything else is left to decodeBytes (it reports false), so that what is
// read, and each error (an id that does not parse is the item's), is the
// decoder's: FuzzAckPlain holds the two to the same acks.
//
// A consumer acks up to a thousand tasks a request: read through
// reflection, each ack cost two strings (its id, parsed and dropped, and
// its lease) and the decoder's walk of its members; here the leases are cut
// from one string and the ids parsed where they lie.
func ackPlain(raw []byte) ([]engine.AckParams, bool) {
	if !utf8.Valid(raw) {
		return nil, false
	}
	d := plainReader{b: raw}
	var acks []engine.AckParams
	var leases []span // each ack's lease, in raw
	size := 0         // of the leases together
	seenAcks := false
	ok := d.object(func(name []byte) bool {
		if string(name) != "acks" || seenAcks {
			return false
		}
		seenAcks = true
		if d.peek() != '[' {
			return false
		}
		d.i++
		// About as many acks as the body has room for (each at least
		// {"id":"<26>","lease":""}).
		n := min(len(raw)/(len(`{"id":"","lease":""},`)+26)+1, engine.MaxClaim+1)
		acks, leases = make([]engine.AckParams, 0, n), make([]span, 0, n)
		if d.peek() == ']' {
			d.i++
			return true
		}
		for {
			var a engine.AckParams
			var lease span
			var seen uint8
			ok := d.object(func(name []byte) bool {
				switch string(name) {
				case "id":
					if seen&1 != 0 {
						return false
					}
					seen |= 1
					v, ok := d.plain()
					if !ok || len(v) != 26 {
						return false
					}
					id, err := task.ParseID(string(v))
					a.ID = id
					return err == nil
				case "lease":
					if seen&2 != 0 {
						return false
					}
					seen |= 2
					var ok bool
					lease, ok = d.span()
					return ok
				}
				return false
			})
			if !ok || seen != 3 {
				return false
			}
			acks, leases = append(acks, a), append(leases, lease)
			size += lease.len()
			switch d.peek() {
			case ',':
				d.i++
			case ']':
				d.i++
				return true
			default:
				return false
			}
		}
	})
	if !ok || !d.end() || !seenAcks {
		return nil, false
	}
	all := make([]byte, 0, size)
	for _, l := range leases {
		all = append(all, raw[l.i:l.j]...)
	}
	s := string(all) // the leases, one allocation
	at := 0
	for k, l := range leases {
		acks[k].Lease = s[at : at+l.len()]
		at += l.len()
	}
	return acks, true
}

// writeAckResults writes the answer of tasks:ack, {"results":[…]}, as
// writeJSON(map[string]any{"results": results}) does: the results
// without an error ({}), nearly all of them, are written without
// encoding/json's reflection over each.
func writeAckResults(w http.ResponseWriter, results []ackManyResult) {
	buf := getBuf()
	defer putBuf(buf)
	b := append((*buf)[:0], `{"results":[`...)
	for i, r := range results {
		if i > 0 {
			b = append(b, ',')
		}
		if r.Error == nil {
			b = append(b, "{}"...)
			continue
		}
		e, err := json.Marshal(r)
		if err != nil {
			*buf = b
			encodeFailed(w)
			return
		}
		b = append(b, e...)
	}
	b = append(b, "]}"...)
	*buf = writeBody(w, http.StatusOK, b) // done with once written
}
