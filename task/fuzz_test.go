package task_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/toc-dev/toc/task"
)

// FuzzParseID checks that the text form of an id round-trips both ways and
// sorts as the bytes do.
func FuzzParseID(f *testing.F) {
	max := bytes.Repeat([]byte{0xFF}, 16)
	f.Add("01ARZ3NDEKTSV4RRFFQ69G5FAV", []byte{}, []byte{1})
	f.Add("01arz3ndektsv4rrffq69g5fav", []byte{0x80}, []byte{0x7F, 0xFF})
	f.Add("7ZZZZZZZZZZZZZZZZZZZZZZZZZ", max, []byte{})
	f.Add("80000000000000000000000000", max[:15], max) // first character over 7
	f.Add("0000000000000000000000000I", []byte{0, 0, 0, 1}, []byte{0, 0, 1})
	f.Add("0000000000000000000000000U", []byte{}, []byte{})
	f.Add("000000000000000000000000000", []byte{}, []byte{})
	f.Add("", []byte{}, []byte{})
	f.Add("0000000000000000000000000\xff", []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, s string, a, b []byte) {
		id, err := task.ParseID(s)
		if err == nil {
			// Anything that parses is the canonical text in either case.
			if got := id.String(); got != strings.ToUpper(s) {
				t.Fatalf("ParseID(%q).String() = %q", s, got)
			}
			var viaText task.ID
			if err := viaText.UnmarshalText([]byte(s)); err != nil || viaText != id {
				t.Fatalf("UnmarshalText(%q) = %x, %v; ParseID gave %x", s, viaText, err, id)
			}
		} else if !errors.Is(err, task.ErrBadID) || id != (task.ID{}) {
			t.Fatalf("ParseID(%q) = %x, %v; want the zero id and ErrBadID", s, id, err)
		}

		var x, y task.ID
		copy(x[:], a)
		copy(y[:], b)
		for _, id := range []task.ID{x, y} {
			s := id.String()
			if len(s) != 26 {
				t.Fatalf("%x.String() = %q, %d characters", id, s, len(s))
			}
			if b, err := id.AppendText([]byte("x")); err != nil || string(b) != "x"+s {
				t.Fatalf("%x.AppendText(x) = %q, %v; want x%s", id, b, err, s)
			}
			for _, text := range []string{s, strings.ToLower(s)} {
				if got, err := task.ParseID(text); err != nil || got != id {
					t.Fatalf("ParseID(%q) = %x, %v; want %x", text, got, err, id)
				}
			}
			j, err := json.Marshal(id)
			var back task.ID
			if err != nil || json.Unmarshal(j, &back) != nil || back != id {
				t.Fatalf("JSON round trip of %x: %s → %x, %v", id, j, back, err)
			}
		}
		if got, want := strings.Compare(x.String(), y.String()), bytes.Compare(x[:], y[:]); got != want {
			t.Fatalf("%x vs %x: text compares %d, bytes %d", x, y, got, want)
		}
	})
}

// FuzzTaskJSON checks that a task's payload survives JSON whatever its
// bytes, and that decoding arbitrary JSON into a task never panics and
// gives a task that encodes and decodes to itself.
func FuzzTaskJSON(f *testing.F) {
	f.Add([]byte(`{"order":42}`), []byte(`{"id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","app":"billing","payload":{"a":1},"payload_base64":""}`))
	f.Add([]byte("\x00\xff binary"), []byte(`{"payload_base64":"AP8gYmluYXJ5"}`))
	f.Add([]byte{}, []byte(`{"payload":null}`))
	f.Add([]byte(`null`), []byte(`{"payload":""}`))
	f.Add([]byte(` "s" `), []byte(`{"payload_base64":"not base64!"}`))
	f.Add([]byte(`[1,2`), []byte(`{"due_at":"2026-01-02T15:04:05.123+05:30","deadline":null,"target":{"http":{"url":"https://x","timeout":"1.5s","headers":{"A":"b"}}},"retry":{"max_attempts":3,"min_backoff":"1s"}}`))
	f.Add([]byte(`1e400`), []byte(`{"target":{"http":{"timeout":"forever"}}}`))
	f.Add([]byte("\"\xff\""), []byte(`{"id":5}`))
	f.Add([]byte(`{}`), []byte(`{"state":"dead","attempts":2,"last_error":"x","lease":"l","lease_expires_at":"0000-01-01T00:00:00Z","finished_at":"9999-12-31T23:59:59.999999999-23:59"}`))
	f.Fuzz(func(t *testing.T, payload, data []byte) {
		in := task.Task{App: "billing", Payload: payload, State: task.Scheduled}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatalf("marshal a task with payload %q: %v", payload, err)
		}
		var out task.Task
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		if !bytes.Equal(out.Payload, payload) {
			t.Fatalf("payload %q came back as %q (via %s)", payload, out.Payload, b)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		// "payload" only for valid JSON in valid UTF-8: encoding/json
		// passes invalid UTF-8 inside strings through, which a client
		// would read back as other bytes.
		if _, has := fields["payload"]; has != (len(payload) > 0 && utf8.Valid(payload) && json.Valid(payload)) {
			t.Fatalf("payload %q: \"payload\" field present %v in %s", payload, has, b)
		}

		var t1 task.Task
		if json.Unmarshal(data, &t1) != nil {
			return
		}
		m1, err := json.Marshal(t1)
		if err != nil {
			t.Fatalf("a task decoded from %q does not encode: %v", data, err)
		}
		var t2 task.Task
		if err := json.Unmarshal(m1, &t2); err != nil {
			t.Fatalf("decode %s (encoded from %q): %v", m1, data, err)
		}
		m2, err := json.Marshal(t2)
		if err != nil || !bytes.Equal(m1, m2) {
			t.Fatalf("not a fixed point:\n%s\n%s (%v)", m1, m2, err)
		}
		if !bytes.Equal(t1.Payload, t2.Payload) {
			t.Fatalf("payload %q came back as %q", t1.Payload, t2.Payload)
		}
	})
}

// FuzzValidate feeds arbitrary input to the validators: they never panic,
// they refuse with a *FieldError, and what they accept holds up. The header
// name and value are fuzzed directly as well as inside the JSON, where the
// fuzzer rarely reaches them.
func FuzzValidate(f *testing.F) {
	seeds := []struct {
		json, app, key, hname, hvalue string
	}{
		{`{"target":{"http":{"url":"https://billing/expire","headers":{"X-A":"b"},"timeout":"10s"}},"retry":{"max_attempts":3,"min_backoff":"1s","max_backoff":"1m"}}`, "billing", "order-42", "X-Trace", "abc"},
		{`{"target":{"pull":{}}}`, "a", "k", "Authorization", "Bearer x"},
		{`{"target":{"amqp":{"url":"amqp://u:p@h/v","exchange":"x","routing_key":"r"}}}`, "a.b_c-d", strings.Repeat("k", 256), "X", "a\tb"},
		{`{"target":{"nats":{"url":"nats://h:4222","subject":"a.b"}}}`, "0", "\xff", "Bad Name", "v"},
		{`{"target":{"nats":{"subject":"a.*"}},"retry":{"max_attempts":-1}}`, "-a", "", "Toc-Id", "v"},
		{`{"target":{"http":{"url":"ftp://x"},"pull":{}}}`, "A", strings.Repeat("k", 257), "X", "a\r\nInjected: 1"},
		{`{"target":{"http":{"url":"http://h","headers":{"Toc-Id":"x","Bad Name":"v"}}}}`, strings.Repeat("a", 65), "é", "", ""},
		{`{"target":{"http":{"url":"http://h","headers":{"X":"a\r\nInjected: 1"}}}}`, "a", "k", "X(", "\x00"},
		{`{"target":{"http":{"url":"http://h","headers":{"X":"a\u0009b"}}}}`, "a", "k", "X", "é"},
		{`{"target":{"http":{"url":"http://h","timeout":"-1s"}},"retry":{"min_backoff":"2m","max_backoff":"1m"}}`, "a", "k", "X", " padded "},
		{`{"target":{"http":{"url":"http://[::1]:80/%zz"}},"retry":{"min_backoff":"1ns"}}`, "a", "k", "X", ""},
	}
	for _, s := range seeds {
		f.Add([]byte(s.json), s.app, s.key, s.hname, s.hvalue)
	}
	f.Fuzz(func(t *testing.T, data []byte, app, key, hname, hvalue string) {
		if err := task.ValidateApp(app); err != nil {
			mustFieldError(t, err, "app")
		} else if len(app) < 1 || len(app) > task.MaxAppLen || !isAppName(app) {
			t.Fatalf("ValidateApp(%q) accepted", app)
		}
		if err := task.ValidateKey(key); err != nil {
			mustFieldError(t, err, "key")
		} else if len(key) < 1 || len(key) > task.MaxKeyLen || !utf8.ValidString(key) || strings.IndexFunc(key, unicode.IsControl) >= 0 {
			t.Fatalf("ValidateKey(%q) accepted", key)
		}
		direct := task.Target{HTTP: &task.HTTPTarget{URL: "https://h/", Headers: map[string]string{hname: hvalue}}}
		checkTarget(t, direct)

		var in struct {
			Target task.Target      `json:"target"`
			Retry  task.RetryPolicy `json:"retry"`
		}
		if json.Unmarshal(data, &in) != nil {
			return
		}
		if err := in.Retry.Validate(); err != nil {
			mustFieldError(t, err, "retry.")
		} else {
			p := in.Retry.WithDefaults()
			if p.MaxAttempts < 1 || p.MaxAttempts > task.MaxMaxAttempts ||
				p.MinBackoff.Std() < task.MinBackoffFloor || p.MaxBackoff < p.MinBackoff {
				t.Fatalf("retry %+v accepted, with defaults %+v", in.Retry, p)
			}
		}
		checkTarget(t, in.Target)
	})
}

// checkTarget validates tg and checks that what is accepted can be sent.
func checkTarget(t *testing.T, tg task.Target) {
	t.Helper()
	if err := tg.Validate(); err != nil {
		mustFieldError(t, err, "target")
		return
	}
	if tg.Kind() == "" {
		t.Fatalf("target %+v accepted without a kind", tg)
	}
	h := tg.HTTP
	if h == nil {
		return
	}
	// The sink must be able to build and send the request.
	req, err := http.NewRequest(http.MethodPost, h.URL, nil)
	if err != nil {
		t.Fatalf("accepted URL %q that a request cannot use: %v", h.URL, err)
	}
	if u, _ := url.Parse(h.URL); u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		t.Fatalf("accepted URL %q", h.URL)
	}
	for k, v := range h.Headers {
		if !sendableHeaderName(k) || strings.HasPrefix(strings.ToLower(k), "toc-") {
			t.Fatalf("accepted header name %q", k)
		}
		req.Header.Set(k, v)
		if !sendableHeaderValue(v) {
			t.Fatalf("accepted header %q value %q, which net/http refuses to send", k, v)
		}
	}
}

func mustFieldError(t *testing.T, err error, fieldPrefix string) {
	t.Helper()
	var fe *task.FieldError
	if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, fieldPrefix) || fe.Message == "" {
		t.Fatalf("error %v (%T) is not a *FieldError for %s…", err, err, fieldPrefix)
	}
}

func isAppName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && strings.IndexByte("._-", c) >= 0) {
			return false
		}
	}
	return true
}

// sendableHeaderName is net/http's rule for header names (httpguts'
// ValidHeaderFieldName): an RFC 7230 token.
func sendableHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// sendableHeaderValue is net/http's rule for header values (httpguts'
// ValidHeaderFieldValue): no control characters but tab.
func sendableHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7F {
			return false
		}
	}
	return true
}
