package task

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on a task's fields.
const (
	MaxAppLen         = 64
	MaxKeyLen         = 256
	MaxHeaders        = 32
	MaxHeaderBytes    = 8 << 10 // all names and values of one target together
	MaxURLLen         = 2048
	MaxHTTPTimeout    = 5 * time.Minute
	MaxMaxAttempts    = 1000
	MinBackoffFloor   = time.Millisecond
	DefaultMaxPayload = 64 << 10
)

// FieldError says which field of a request is wrong and why. The API answers
// it with 400 and the field's name.
type FieldError struct {
	Field   string // JSON path of the field, like "target.http.url"
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// ValidateApp checks an app name: [a-z0-9][a-z0-9._-]{0,63}.
func ValidateApp(app string) error {
	if app == "" {
		return fieldErr("app", "is required")
	}
	if len(app) > MaxAppLen {
		return fieldErr("app", "is longer than %d characters", MaxAppLen)
	}
	for i := 0; i < len(app); i++ {
		c := app[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fieldErr("app", "must match [a-z0-9][a-z0-9._-]{0,63}, got %q", app)
		}
	}
	return nil
}

// ValidateKey checks a business key: 1 to 256 bytes of UTF-8.
func ValidateKey(key string) error {
	if key == "" {
		return fieldErr("key", "must not be empty (leave it out for a task without a key)")
	}
	if len(key) > MaxKeyLen {
		return fieldErr("key", "is %d bytes, more than %d", len(key), MaxKeyLen)
	}
	if !utf8.ValidString(key) {
		return fieldErr("key", "is not valid UTF-8")
	}
	for i, r := range key {
		if unicode.IsControl(r) {
			// A key goes into URLs, logs, headers and terminals, where a
			// control character breaks or disguises it.
			return fieldErr("key", "has the control character %U at byte %d: keys are printable text", r, i)
		}
	}
	return nil
}

// Validate checks a target: exactly one kind, and that kind's fields.
func (t Target) Validate() error {
	n := 0
	if t.HTTP != nil {
		n++
	}
	if t.Pull != nil {
		n++
	}
	if t.AMQP != nil {
		n++
	}
	if t.NATS != nil {
		n++
	}
	if n != 1 {
		return fieldErr("target", `needs exactly one of "http", "pull", "amqp" or "nats"`)
	}
	if a := t.AMQP; a != nil {
		if err := checkBrokerURL(a.URL, "target.amqp.url", "an amqp:// or amqps:// URL", "amqp", "amqps"); err != nil {
			return err
		}
		if len(a.Exchange) > 255 {
			return fieldErr("target.amqp.exchange", "is longer than 255 bytes")
		}
		if len(a.RoutingKey) > 255 {
			return fieldErr("target.amqp.routing_key", "is longer than 255 bytes")
		}
	}
	if n := t.NATS; n != nil {
		if err := checkBrokerURL(n.URL, "target.nats.url", "a nats:// or tls:// URL", "nats", "tls"); err != nil {
			return err
		}
		if n.Subject == "" || strings.ContainsAny(n.Subject, " \t\r\n*>") || len(n.Subject) > 255 {
			return fieldErr("target.nats.subject", "is required: a literal subject without spaces or wildcards")
		}
	}
	if h := t.HTTP; h != nil {
		if h.URL == "" {
			return fieldErr("target.http.url", "is required")
		}
		if len(h.URL) > MaxURLLen {
			return fieldErr("target.http.url", "is longer than %d bytes", MaxURLLen)
		}
		u, err := url.Parse(h.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			if err != nil {
				// Not echoed: a URL that does not parse may hold a password
				// where Redacted cannot find it.
				return fieldErr("target.http.url", "must be an absolute http:// or https:// URL")
			}
			return fieldErr("target.http.url", "must be an absolute http:// or https:// URL, got %q", u.Redacted())
		}
		if h.Timeout < 0 || h.Timeout.Std() > MaxHTTPTimeout {
			return fieldErr("target.http.timeout", "must be between 0 (default %s) and %s", DefaultHTTPTimeout, MaxHTTPTimeout)
		}
		if len(h.Headers) > MaxHeaders {
			return fieldErr("target.http.headers", "has %d headers, more than %d", len(h.Headers), MaxHeaders)
		}
		size := 0
		for k, v := range h.Headers {
			size += len(k) + len(v)
			if !validHeaderName(k) {
				return fieldErr("target.http.headers", "%q is not a valid header name", k)
			}
			if strings.HasPrefix(strings.ToLower(k), "toc-") {
				return fieldErr("target.http.headers", "%q: names starting with Toc- are set by toc", k)
			}
			for i := 0; i < len(v); i++ {
				if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
					return fieldErr("target.http.headers", "value of %q contains a control character", k)
				}
			}
		}
		if size > MaxHeaderBytes {
			return fieldErr("target.http.headers", "are %d bytes, more than %d", size, MaxHeaderBytes)
		}
	}
	return nil
}

// MaxBrokerNameLen is the longest broker name.
const MaxBrokerNameLen = 64

// IsBrokerName reports whether s is a broker name: 1 to 64 letters, digits,
// '.', '_' or '-'. An amqp or nats target's url is a broker name or a URL;
// the server's configuration says which brokers a name stands for and which
// an app may use.
func IsBrokerName(s string) bool {
	if s == "" || len(s) > MaxBrokerNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// checkBrokerURL checks the url of a broker target: empty (the server's
// default broker), a broker name, or a URL with one of schemes.
func checkBrokerURL(raw, field, want string, schemes ...string) error {
	if raw == "" || IsBrokerName(raw) {
		return nil
	}
	if len(raw) > MaxURLLen {
		return fieldErr(field, "is longer than %d bytes", MaxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || !slices.Contains(schemes, u.Scheme) || u.Host == "" {
		return fieldErr(field, "must be a broker name (letters, digits, '.', '_', '-') or %s", want)
	}
	return nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7F || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// Validate checks a retry policy as given (before defaults).
func (p RetryPolicy) Validate() error {
	if p.MaxAttempts < 0 || p.MaxAttempts > MaxMaxAttempts {
		return fieldErr("retry.max_attempts", "must be between 1 and %d", MaxMaxAttempts)
	}
	if p.MinBackoff != 0 && p.MinBackoff.Std() < MinBackoffFloor {
		return fieldErr("retry.min_backoff", "must be at least %s", MinBackoffFloor)
	}
	if p.MaxBackoff != 0 && p.MaxBackoff.Std() < MinBackoffFloor {
		return fieldErr("retry.max_backoff", "must be at least %s", MinBackoffFloor)
	}
	if p.MinBackoff.Std() > 24*time.Hour {
		return fieldErr("retry.min_backoff", "must be at most 24h")
	}
	if p.MaxBackoff.Std() > 7*24*time.Hour {
		return fieldErr("retry.max_backoff", "must be at most 168h")
	}
	if p.MinBackoff != 0 && p.MaxBackoff != 0 && p.MaxBackoff < p.MinBackoff {
		return fieldErr("retry.max_backoff", "must not be less than retry.min_backoff")
	}
	return nil
}
