package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
)

// checkDuplicateKeys refuses a JSON document in which an object repeats a
// key ({"app":"a","app":"b"}): encoding/json would silently keep the last,
// so a request could be read differently by a proxy or a log than by toc.
// The value of a "payload" member is the user's own data and is not checked.
func checkDuplicateKeys(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		object bool
		keys   map[string]bool
		expect bool // object: the next string token is a key
	}
	var stack []*frame
	skipDepth := -1 // inside a payload value: the stack depth it started at
	pendingSkip := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // syntax errors are reported by the real decode
		}
		top := (*frame)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expect && skipDepth < 0 {
			key, ok := tok.(string)
			if ok {
				if top.keys[key] {
					return &apiError{status: http.StatusBadRequest, code: "invalid_field", field: key,
						msg: fmt.Sprintf("%s: appears more than once in the same object", key)}
				}
				top.keys[key] = true
				top.expect = false
				pendingSkip = key == "payload"
				continue
			}
		}
		if top != nil && top.object && top.expect && skipDepth >= 0 {
			if _, ok := tok.(string); ok {
				top.expect = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if pendingSkip && skipDepth < 0 {
				skipDepth = len(stack)
			}
			pendingSkip = false
			f := &frame{object: tok == json.Delim('{'), expect: tok == json.Delim('{')}
			if f.object {
				f.keys = map[string]bool{}
			}
			stack = append(stack, f)
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if skipDepth == len(stack) {
				skipDepth = -1
			}
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].expect = true
			}
		default: // a scalar value
			pendingSkip = false
			if top != nil && top.object {
				top.expect = true
			}
		}
		if len(stack) == 0 && tok != nil {
			if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
				return nil
			}
		}
	}
}
