package httpapi

import (
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/toc-dev/toc/task"
)

// createFast reads one task of a batch by hand when it has the plain form
// clients write: the members of createRequest but retry, each a string
// without escapes, the payload any value but null, the target {"http":
// {"url":…,"timeout":…}} or {"pull":{}}. Anything else, and any value a
// field refuses, is left to decodeBytes (it reports false), so that what
// is read, and each error, is the decoder's: FuzzCreateFast holds the two
// to the same createRequest.
//
// raw has been checked by the batch's decoder (jsontext: valid JSON and
// UTF-8, no name twice in an object), which this reader relies on for the
// payload alone; the rest it checks as it reads.
func createFast(raw []byte, cr *createRequest) bool {
	d := plainReader{b: raw}
	var w createRequest
	var seen uint16
	// The strings the task keeps (app, key, url) are copied out of raw
	// in one string at the end, the others each on its own (they are
	// dropped once read: not kept alive by the task's), and the
	// pointers to the optional ones point into one array: a create
	// allocates a few times, not once per field.
	var app, key, url span
	var held *itemAlloc // the strings and the target, in one allocation
	hold := func() *itemAlloc {
		if held == nil {
			held = new(itemAlloc)
		}
		return held
	}
	var tg *targetAlloc
	ok := d.object(func(name []byte) bool {
		var bit uint16
		var p **string
		var slot int
		switch string(name) {
		case "app":
			bit = 1
		case "key":
			bit = 2
		case "due_at":
			bit, p, slot = 4, &w.DueAt, 0
		case "delay":
			bit, p, slot = 8, &w.Delay, 1
		case "deadline":
			bit, p, slot = 16, &w.Deadline, 2
		case "payload_base64":
			bit, p, slot = 32, &w.PayloadBase64, 3
		case "payload":
			bit = 64
		case "target":
			bit = 128
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		switch {
		case bit == 1:
			var ok bool
			app, ok = d.span()
			return ok
		case bit == 2:
			var ok bool
			key, ok = d.span()
			return ok
		case p != nil:
			s, ok := d.str()
			strs := &hold().strs
			strs[slot] = s
			*p = &strs[slot]
			return ok
		case bit == 64:
			v, ok := d.value()
			if ok {
				w.Payload = jsontext.Value(append([]byte(nil), v...))
			}
			return ok
		}
		tg = &hold().target
		w.Target = &tg.t
		return d.target(tg, &url)
	})
	if !ok || !d.end() {
		return false
	}
	kept := string(raw[app.i:app.j]) + string(raw[key.i:key.j]) + string(raw[url.i:url.j])
	w.App, kept = kept[:app.len()], kept[app.len():]
	if seen&2 != 0 {
		strs := &hold().strs
		strs[4] = kept[:key.len()]
		w.Key = &strs[4]
	}
	kept = kept[key.len():]
	if tg != nil && tg.t.HTTP != nil {
		tg.h.URL = kept
	}
	*cr = w
	return true
}

// span is where a string without escapes lies in the reader's bytes.
type span struct{ i, j int }

func (s span) len() int { return s.j - s.i }

// targetAlloc is a target read by hand with its http member: one
// allocation for the two.
type targetAlloc struct {
	t task.Target
	h task.HTTPTarget
}

// itemAlloc is what createFast allocates of an item: the optional
// strings (due_at, delay, deadline, payload_base64, key) the request
// points to, and its target.
type itemAlloc struct {
	strs   [5]string
	target targetAlloc
}

// createPlain is createFast for a body no decoder has checked (a single
// create's): what createFast leaves to the batch's decoder is checked
// here, the UTF-8 of the whole body and the payload as a JSON value
// (syntax, no name twice in an object), so that it takes only what
// decodeBytes takes (FuzzCreatePlain). Cheaper than checking the whole
// body with jsontext first: createFast reads the rest strictly.
func createPlain(raw []byte, cr *createRequest) bool {
	var w createRequest
	if !utf8.Valid(raw) || !createFast(raw, &w) || (w.Payload != nil && !w.Payload.IsValid()) {
		return false
	}
	*cr = w
	return true
}

// plainReader reads JSON in createFast's plain form; each method reports
// false for anything else.
type plainReader struct {
	b []byte
	i int
}

func (d *plainReader) peek() byte {
	for d.i < len(d.b) {
		switch c := d.b[d.i]; c {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return c
		}
	}
	return 0
}

func (d *plainReader) end() bool { return d.peek() == 0 && d.i == len(d.b) }

// object reads an object, calling member at each name with the reader at
// its value, which member must read.
func (d *plainReader) object(member func(name []byte) bool) bool {
	if d.peek() != '{' {
		return false
	}
	d.i++
	if d.peek() == '}' {
		d.i++
		return true
	}
	for {
		name, ok := d.plain()
		if !ok || d.peek() != ':' {
			return false
		}
		d.i++
		if !member(name) {
			return false
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// plain reads a string without escapes or control characters and returns
// its bytes (in b): raw's UTF-8 was checked by the batch's decoder.
func (d *plainReader) plain() ([]byte, bool) {
	if d.peek() != '"' {
		return nil, false
	}
	start := d.i + 1
	for j := start; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			d.i = j + 1
			return d.b[start:j], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// span reads a string as plain does and returns where it lies in b.
func (d *plainReader) span() (span, bool) {
	v, ok := d.plain()
	if !ok {
		return span{}, false
	}
	return span{d.i - 1 - len(v), d.i - 1}, true
}

func (d *plainReader) str() (string, bool) {
	v, ok := d.plain()
	return string(v), ok
}

// value skips a value other than null and returns its bytes (in b).
func (d *plainReader) value() ([]byte, bool) {
	c := d.peek()
	if c == 'n' || c == 0 {
		return nil, false
	}
	start, depth := d.i, 0
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			for d.i < len(d.b) && d.b[d.i] != '"' {
				if d.b[d.i] == '\\' {
					d.i++
				}
				d.i++
			}
			if d.i >= len(d.b) {
				return nil, false
			}
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth == 0 {
				return d.b[start:d.i], d.i > start
			}
			depth--
		case depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return d.b[start:d.i], d.i > start
		}
		d.i++
		if depth == 0 && (c == '"' || c == '}' || c == ']') {
			return d.b[start:d.i], true
		}
	}
	return d.b[start:d.i], d.i > start
}

// target reads {"http":{"url":…,"timeout":…}} or {"pull":{}} into
// tg.t, each member at most once; the url is left in b, at url.
func (d *plainReader) target(tg *targetAlloc, url *span) bool {
	t := &tg.t
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "http":
			if t.HTTP != nil {
				return false
			}
			t.HTTP = &tg.h
			return d.httpTarget(&tg.h, url)
		case "pull":
			if t.Pull != nil {
				return false
			}
			t.Pull = new(task.PullTarget)
			return d.object(func([]byte) bool { return false })
		}
		return false
	})
}

func (d *plainReader) httpTarget(h *task.HTTPTarget, url *span) bool {
	var seen uint8
	return d.object(func(name []byte) bool {
		switch {
		case string(name) == "url" && seen&1 == 0:
			seen |= 1
			var ok bool
			*url, ok = d.span()
			return ok
		case string(name) == "timeout" && seen&2 == 0:
			seen |= 2
			s, ok := d.plain()
			return ok && h.Timeout.UnmarshalText(s) == nil
		}
		return false
	})
}
