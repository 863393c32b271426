package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/toc-dev/toc/task"
)

// Request bodies are decoded in one pass by go-json-experiment/json, the
// implementation behind the encoding/json/v2 proposal. Its defaults are what
// an API read by other tools (proxies, logs, audit) needs, and encoding/json
// lacks all of them:
//   - a name repeated in an object is an error ({"app":"a","app":"b"}), so
//     that no two readers of a body can see different values;
//   - names match exactly: "APP" is not "app" but an unknown field;
//   - strings must be valid UTF-8, so that distinct keys cannot collapse into
//     one when invalid bytes are replaced;
//   - the time it takes is linear in the size of the input, repeated-name
//     checks included.
//
// Payloads are held to the same rules (I-JSON, RFC 7493); a payload that is
// not travels as payload_base64.
var decodeOptions = json.JoinOptions(
	json.RejectUnknownMembers(true),
	json.WithUnmarshalers(json.UnmarshalFromFunc(decodeHeaders)),
)

// decodeHeaders reads a target's headers, refusing the object at its
// (task.MaxHeaders+1)th member instead of building a map of any size first.
func decodeHeaders(dec *jsontext.Decoder, h *map[string]string) error {
	switch dec.PeekKind() {
	case 'n':
		_, err := dec.ReadToken()
		*h = nil
		return err
	case '{':
	default:
		return json.SkipFunc // the default decoding reports the wrong type
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	m := make(map[string]string)
	for dec.PeekKind() != '}' {
		if len(m) == task.MaxHeaders {
			return &task.FieldError{Field: "target.http.headers", Message: fmt.Sprintf("has more than %d headers", task.MaxHeaders)}
		}
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		name := tok.String() // before the next read, which reuses tok's buffer
		if dec.PeekKind() != '"' {
			return &task.FieldError{Field: "target.http.headers", Message: fmt.Sprintf("value of %q must be a string", name)}
		}
		if tok, err = dec.ReadToken(); err != nil {
			return err
		}
		m[name] = tok.String()
	}
	if _, err := dec.ReadToken(); err != nil { // }
		return err
	}
	*h = m
	return nil
}

// decode reads exactly one JSON object from the body, refusing unknown or
// repeated fields, invalid UTF-8, trailing data and bodies over limit. The
// body is charged to the body budget first (takeBody).
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	return readBody(w, r, limit, func(raw []byte) error { return decodeBytes(raw, v) })
}

// decodeCreate is decode for a create's body: the plain form clients
// write is read by hand (createPlain); any other body, and every error, is
// the decoder's.
func decodeCreate(w http.ResponseWriter, r *http.Request, limit int64, cr *createRequest) error {
	return readBody(w, r, limit, func(raw []byte) error {
		if createPlain(raw, cr) {
			return nil
		}
		*cr = createRequest{}
		return decodeBytes(raw, cr)
	})
}

// readBody reads the body, charged to the body budget first (takeBody) and
// refused over limit, into a pooled buffer and hands it to decode, which
// must keep nothing of it.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, decode func(raw []byte) error) error {
	if err := takeBody(r, limit); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	buf := getBuf()
	defer putBuf(buf)
	raw, err := readAll(r.Body, (*buf)[:0])
	*buf = raw
	if err != nil {
		return err // *http.MaxBytesError → 413
	}
	// Nothing decoded keeps raw: strings and payloads (jsontext.Value) are
	// copied out of it, so the buffer goes back to the pool.
	return decode(raw)
}

// readAll is io.ReadAll into buf (a pooled buffer, from its length).
func readAll(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return buf, err
		}
	}
}

// bufs are the buffers a request's body is read into and an answer's JSON
// written into: each is done with once the request is decoded or the
// answer written (the ResponseWriter copies it).
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledBuf bounds the buffers kept in bufs: a large body's or answer's
// is left to the collector. It keeps a full tasks:ack body's (1000 acks,
// about 100 KB, read into a buffer grown to some 130 KB): at 64 KB each
// ack request grew its buffer again from 1 KB, a fifth of a kilobyte per
// task acked.
const maxPooledBuf = 256 << 10

func getBuf() *[]byte { return bufs.Get().(*[]byte) }

// keepBuf reports whether a buffer of capacity c goes back to bufs.
func keepBuf(c int) bool { return c <= maxPooledBuf }

func putBuf(b *[]byte) {
	if keepBuf(cap(*b)) {
		*b = (*b)[:0]
		bufs.Put(b)
	}
}

// decodeStream is decode for a large body (a batch's): the body is decoded
// as it is read, never held whole, with opts (unmarshalers that keep only
// what they need of each element) besides the rules above.
func decodeStream(w http.ResponseWriter, r *http.Request, limit int64, v any, opts json.Options) error {
	if err := takeBody(r, limit); err != nil {
		return err
	}
	return decodeReader(http.MaxBytesReader(w, r.Body, limit), v, opts)
}

// decodeReader is decodeStream's decoding.
func decodeReader(rd io.Reader, v any, opts json.Options) error {
	body := &sawReader{r: rd}
	err := json.UnmarshalRead(body, v, decodeOptions, opts)
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &mbe):
		return mbe // 413
	case !body.saw:
		return errEmptyBody
	}
	return jsonError(err)
}

// sawReader notes whether anything but whitespace was read.
type sawReader struct {
	r   io.Reader
	saw bool
}

func (s *sawReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if !s.saw && len(bytes.TrimSpace(p[:n])) > 0 {
		s.saw = true
	}
	return n, err
}

var errEmptyBody = &apiError{status: http.StatusBadRequest, code: "invalid_json", msg: "request body is empty; send a JSON object"}

// decodeBytes is decode for a body already read.
func decodeBytes(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return errEmptyBody
	}
	if err := json.Unmarshal(raw, v, decodeOptions); err != nil {
		return jsonError(err)
	}
	return nil
}

// jsonError turns a decoding error into a 400 that names the field when it
// can: the field is the JSON path of the value, like "retry.min_backoff".
func jsonError(err error) error {
	var fe *task.FieldError
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.As(err, &fe):
		return fe
	case errors.As(err, &syn):
		field := fieldOf(syn.JSONPointer)
		switch {
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			return badJSONField(field, "appears more than once in the same object")
		case syn.Err != nil && strings.Contains(syn.Err.Error(), "invalid UTF-8"):
			if field == "" {
				return &apiError{status: http.StatusBadRequest, code: "invalid_json", msg: "request body is not valid UTF-8"}
			}
			return badJSONField(field, "is not valid UTF-8 (send bytes that are not text as payload_base64)")
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return &apiError{status: http.StatusBadRequest, code: "invalid_json", msg: "request body is truncated JSON"}
		case syn.Err != nil && strings.Contains(syn.Err.Error(), "after top-level value"):
			return &apiError{status: http.StatusBadRequest, code: "invalid_json", msg: "request body has data after the JSON object"}
		}
		return &apiError{status: http.StatusBadRequest, code: "invalid_json", field: field,
			msg: fmt.Sprintf("request body is not valid JSON (at byte %d): %v", syn.ByteOffset, syn.Err)}
	case errors.As(err, &sem):
		field := fieldOf(sem.JSONPointer)
		switch {
		case errors.Is(sem.Err, json.ErrUnknownName):
			return badJSONField(field, "is not a known field (names are case-sensitive)")
		case sem.GoType != nil && sem.Err != nil && sem.JSONKind == '"':
			// A string the field's type refused: a duration, say.
			return badJSONField(field, sem.Err.Error())
		case sem.GoType != nil:
			return badJSONField(field, fmt.Sprintf("must be %s, got %s", kindName(sem.GoType.Kind().String()), jsonKindName(sem.JSONKind)))
		}
		return badJSONField(field, sem.Error())
	}
	return &apiError{status: http.StatusBadRequest, code: "invalid_json", msg: "request body: " + err.Error()}
}

func badJSONField(field, msg string) error {
	return &apiError{status: http.StatusBadRequest, code: "invalid_field", field: field, msg: field + ": " + msg}
}

// fieldOf writes a JSON pointer (/target/http/url) as the API names fields
// (target.http.url).
func fieldOf(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

func kindName(k string) string {
	switch k {
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "int", "int64", "float64":
		return "a number"
	}
	return "a " + k
}

func jsonKindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "another kind of value"
}
