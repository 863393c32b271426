package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/toc-dev/toc/task"
)

// The responses that carry tasks are framed by hand around each task's own
// JSON (Task.AppendJSON, which MarshalJSON calls). json.Marshal of a value holding tasks calls that method and
// then validates and compacts its output once more: for a batch of 1000
// creates that second pass was a fifth of the request's CPU (#13).

// writeJSON writes v as the JSON response body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	if t, ok := v.(*task.Task); ok {
		buf := getBuf()
		defer putBuf(buf)
		b, err := t.AppendJSON((*buf)[:0])
		*buf = b
		if err != nil {
			encodeFailed(w)
			return
		}
		*buf = writeBody(w, status, b) // done with once written
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		encodeFailed(w)
		return
	}
	writeBody(w, status, b)
}

// encodeFailed answers 500 when an answer could not be encoded (a task
// always encodes: this is for a bug).
func encodeFailed(w http.ResponseWriter) {
	writeBody(w, http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encode response"}}`))
}

// jsonContentType is the Content-Type of every JSON answer, shared: the
// header's value is only read once set (Header.Set would allocate it anew
// for each answer).
var jsonContentType = []string{"application/json"}

// writeBody writes b and a newline as the answer, and returns b with the
// newline (which the writer has copied: the caller may reuse it). It sets
// Content-Length: an answer larger than the server's buffer would
// otherwise go chunked, and its client would not know its size (a
// claim's 1000 tasks are half a megabyte, read into a buffer grown from
// nothing).
func writeBody(w http.ResponseWriter, status int, b []byte) []byte {
	b = append(b, '\n')
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return b
}

// taskBytes is about what one task's JSON takes, to size the buffers;
// minimalBytes what a minimal batch result takes
// ({"task":{"id":"…"},"created":true}).
const (
	taskBytes    = 512
	minimalBytes = 64
)

// taskListBufs are the buffers of the answers that list tasks (a claim's):
// up to MaxClaim tasks, larger than bufs keeps.
var taskListBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxTaskListBuf bounds the buffers kept in taskListBufs.
const maxTaskListBuf = 4 << 20

// writeTasks writes {"<name>":[tasks...]} with status 200.
func writeTasks(w http.ResponseWriter, name string, ts []*task.Task) {
	buf := taskListBufs.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxTaskListBuf {
			taskListBufs.Put(buf)
		}
	}()
	b := slices.Grow((*buf)[:0], 16+taskBytes*len(ts))
	b = append(append(append(b, `{"`...), name...), `":[`...)
	for i, t := range ts {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = t.AppendJSON(b); err != nil {
			*buf = b[:0]
			encodeFailed(w)
			return
		}
	}
	*buf = writeBody(w, http.StatusOK, append(b, "]}"...))[:0] // written: reused
}

// preferMinimal reports whether r asks for a minimal answer (RFC 7240's
// "Prefer: return=minimal").
func preferMinimal(r *http.Request) bool {
	for _, v := range r.Header.Values("Prefer") {
		for pref := range strings.SplitSeq(v, ",") {
			pref, _, _ = strings.Cut(pref, ";") // its parameters
			if name, val, _ := strings.Cut(pref, "="); strings.EqualFold(strings.TrimSpace(name), "return") &&
				strings.EqualFold(strings.Trim(strings.TrimSpace(val), `"`), "minimal") {
				return true
			}
		}
	}
	return false
}

// writeResults writes a batch's {"results":[items...]} with status 200;
// minimal, each task as {"id":...} alone.
func writeResults(w http.ResponseWriter, items []batchItem, minimal bool) {
	if minimal {
		w.Header().Set("Preference-Applied", "return=minimal")
	}
	size := taskBytes
	if minimal {
		size = minimalBytes
	}
	b := make([]byte, 0, 16+size*len(items))
	b = append(b, `{"results":[`...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		b, err = it.appendJSON(b, minimal)
		if err != nil {
			encodeFailed(w)
			return
		}
	}
	writeBody(w, http.StatusOK, append(b, "]}"...))
}

// appendJSON appends what json.Marshal(it) would; minimal, with the task
// as {"id":...} alone.
func (it *batchItem) appendJSON(b []byte, minimal bool) ([]byte, error) {
	if it.Task == nil || it.Created == nil {
		ib, err := json.Marshal(it)
		return append(b, ib...), err
	}
	b = append(b, `{"task":`...)
	if minimal {
		b, _ = it.Task.ID.AppendText(append(b, `{"id":"`...)) // never fails
		b = append(b, `"}`...)
	} else {
		var err error
		if b, err = it.Task.AppendJSON(b); err != nil {
			return b, err
		}
	}
	b = append(b, `,"created":`...)
	return append(strconv.AppendBool(b, *it.Created), '}'), nil
}
