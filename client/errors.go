package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/toc-dev/toc/task"
)

// Error is a refusal from the server: any answer outside 2xx.
type Error struct {
	// Status is the HTTP status: 400 (bad request; Field names the field),
	// 404, 409 (conflict; Task is the task as it is), 413, 429, 503 or 507
	// (the embedded store's disk is full: nothing was stored). It is
	// 0 for a refusal inside a [Client.ScheduleBatch] result; inside a
	// [Client.AckMany] result it is the status the Code stands for.
	Status int
	// Code is the server's machine-readable reason, "" when the answer was
	// not toc's JSON error (a proxy's page, say).
	Code string
	// Message says what went wrong, for people.
	Message string
	// Field is the JSON path of the offending request field on a 400, like
	// "target.http.url".
	Field string
	// Task is the task in its current state, sent with a 409.
	Task *task.Task
}

// Error reads like "toc: target.http.url: is required (HTTP 400, invalid_argument)".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("toc: ")
	msg := strings.TrimPrefix(e.Message, "toc: ")
	if msg == "" {
		msg = strings.ToLower(http.StatusText(e.Status))
	}
	if msg == "" {
		msg = "request refused"
	}
	if e.Field != "" && !strings.HasPrefix(msg, e.Field) {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(msg)
	var detail []string
	if e.Status != 0 {
		detail = append(detail, fmt.Sprintf("HTTP %d", e.Status))
	}
	if e.Code != "" {
		detail = append(detail, e.Code)
	}
	if e.Task != nil {
		detail = append(detail, fmt.Sprintf("task %s is %s", e.Task.ID, e.Task.State))
	}
	if len(detail) > 0 {
		b.WriteString(" (")
		b.WriteString(strings.Join(detail, ", "))
		b.WriteString(")")
	}
	return b.String()
}

// IsNotFound reports whether err is an [*Error] with status 404: no task
// (or schedule) has that id, or that app and key.
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// IsConflict reports whether err is an [*Error] with status 409: the task's
// (or schedule's) state does not allow the call, or a lease is no longer
// current. The
// *Error's Task, when set, is the task as it is.
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict) }

func hasStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// statusOfCode is the HTTP status an error code stands for (the API's
// ErrorBody.code), 0 for a code it does not know.
func statusOfCode(code string) int {
	switch code {
	case "invalid_json", "invalid_field":
		return http.StatusBadRequest
	case "unauthenticated":
		return http.StatusUnauthorized
	case "forbidden":
		return http.StatusForbidden
	case "not_found":
		return http.StatusNotFound
	case "conflict", "max_schedules":
		return http.StatusConflict
	case "too_large":
		return http.StatusRequestEntityTooLarge
	case "rate_limited", "too_many_requests":
		return http.StatusTooManyRequests
	case "internal":
		return http.StatusInternalServerError
	case "not_implemented":
		return http.StatusNotImplemented
	case "not_ready":
		return http.StatusServiceUnavailable
	}
	return 0
}

// apiError is the "error" object of an error answer.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// decodeError turns a non-2xx answer into *Error. A body that is not toc's
// JSON error still gives an *Error, with the start of the body as Message.
func decodeError(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		e.Message = fmt.Sprintf("%s (reading the answer: %v)", strings.ToLower(http.StatusText(resp.StatusCode)), err)
		return e
	}
	var w struct {
		Error *apiError       `json:"error"`
		Task  json.RawMessage `json:"task"`
	}
	if json.Unmarshal(body, &w) == nil && w.Error != nil {
		e.Code, e.Message, e.Field = w.Error.Code, w.Error.Message, w.Error.Field
		if len(w.Task) > 0 && string(w.Task) != "null" {
			t := new(task.Task)
			if json.Unmarshal(w.Task, t) == nil { // the error matters more than the task
				e.Task = t
			}
		}
		return e
	}
	e.Message = snippet(body)
	return e
}

// snippet returns the start of a non-toc error body as one line of text.
func snippet(b []byte) string {
	const max = 200
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > max {
		s = s[:max]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}
