package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/task"
)

func TestDecodeRefuses(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		batch bool
		field string // "" = accepted; "-" = refused without a field
	}{
		{"plain", `{"app":"a","delay":"1s"}`, false, ""},
		{"repeated field", `{"app":"a","app":"b"}`, false, "app"},
		{"repeated nested field", `{"target":{"http":{"url":"x","url":"y"}}}`, false, "target.http.url"},
		{"repeated in payload", `{"payload":{"a":1,"a":2},"app":"x"}`, false, "payload.a"},
		{"repeated after payload", `{"payload":{"a":{"b":1}},"app":"x","app":"y"}`, false, "app"},
		{"repeated in a batch item", `{"tasks":[{"app":"a"},{"app":"a","key":"k","key":"k"}]}`, true, "tasks.1.key"},
		{"batch past its cap", `{"tasks":[` + strings.Repeat(`null,`, 1000) + `null]}`, true, "tasks"},
		{"repeated retry field", `{"retry":{"max_attempts":1,"max_attempts":2}}`, false, "retry.max_attempts"},
		{"repeated, escaped", `{"a\u0070p":"x","app":"y"}`, false, "app"},
		{"repeated header", `{"target":{"http":{"url":"x","headers":{"A":"1","A":"2"}}}}`, false, "target.http.headers.A"},
		{"case variant", `{"app":"shop","APP":"bank"}`, false, "APP"},
		{"case variant nested", `{"retry":{"Max_Attempts":3}}`, false, "retry.Max_Attempts"},
		{"unknown field", `{"app":"a","colour":"red"}`, false, "colour"},
		{"bad duration", `{"retry":{"min_backoff":"fast"}}`, false, "retry.min_backoff"},
		{"bad timeout", `{"target":{"http":{"url":"x","timeout":"soon"}}}`, false, "target.http.timeout"},
		{"wrong type", `{"retry":{"max_attempts":"3"}}`, false, "retry.max_attempts"},
		{"key not UTF-8", "{\"app\":\"a\",\"key\":\"k\xff\"}", false, "key"},
		{"payload not UTF-8", "{\"app\":\"a\",\"payload\":\"\xc3\"}", false, "payload"},
		{"too many headers", `{"target":{"http":{"url":"x","headers":{` + headers(task.MaxHeaders+1) + `}}}}`, false, "target.http.headers"},
		{"as many headers as allowed", `{"target":{"http":{"url":"x","headers":{` + headers(task.MaxHeaders) + `}}}}`, false, ""},
		{"header not a string", `{"target":{"http":{"url":"x","headers":{"A":1}}}}`, false, "target.http.headers"},
		{"truncated", `{"app":"x",`, false, "-"},
		{"trailing data", `{"app":"x"} {}`, false, "-"},
		{"empty", ` `, false, "-"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.batch {
				_, err = readBatchBytes(New(Config{}), []byte(c.in), adminPrincipal, time.Now())
			} else {
				err = decodeBytes([]byte(c.in), &createRequest{})
			}
			switch c.field {
			case "":
				if err != nil {
					t.Fatalf("%s: %v, want accepted", c.in, err)
				}
				return
			case "-":
				if err == nil {
					t.Fatalf("%s: accepted, want a 400", c.in)
				}
			}
			status, _, field := statusOf(err)
			if status != http.StatusBadRequest {
				t.Errorf("%s: status %d (%v), want 400", c.in, status, err)
			}
			if c.field != "-" && field != c.field {
				t.Errorf("%s: field %q (%v), want %q", c.in, field, err, c.field)
			}
			var ae *apiError
			var fe *task.FieldError
			if !errors.As(err, &ae) && !errors.As(err, &fe) {
				t.Errorf("%s: %T is not an API error", c.in, err)
			}
		})
	}
}

// headers returns n members of a headers object: "H0":"v","H1":"v",…
func headers(n int) string {
	b := make([]byte, 0, n*10)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `"H`...)
		b = append(b, []byte(itoa(i))...)
		b = append(b, `":"v"`...)
	}
	return string(b)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
