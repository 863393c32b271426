// Package config reads toc's configuration file (YAML) and turns each
// declared app into the policy the engine and the API apply.
//
// The file's fields use the same names as the HTTP API (snake_case), and a
// target in the file is written exactly as in a create request. Unknown
// fields are errors, so a typo does not silently do nothing.
//
//	listen: 127.0.0.1:7070
//	data: ./toc-data
//	admin_tokens: [<sha256 hex of a token>]
//	apps:
//	  shop:
//	    target: {http: {url: "https://shop.internal/timeouts"}}
//	    retry: {max_attempts: 10, min_backoff: 2s, max_backoff: 5m}
//	    max_payload: 16384
//	    rate: {deliveries_per_second: 200, burst: 50, max_in_flight: 64, creates_per_second: 1000}
//	    tokens: [<sha256 hex>]
//	    signing_secrets: [current-secret, previous-secret]
//	    allow_private_targets: false
//	    allowed_hosts: [receiver.internal]
package config

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toc-dev/toc/task"
)

// File is the configuration file. Zero fields mean "not set": the flag's
// value or the built-in default applies.
type File struct {
	Listen          string        `json:"listen,omitempty"`
	Data            string        `json:"data,omitempty"`
	Retention       task.Duration `json:"retention,omitempty"`
	ShutdownTimeout task.Duration `json:"shutdown_timeout,omitempty"`
	MaxPayload      int           `json:"max_payload,omitempty"`
	MaxInFlight     int           `json:"max_in_flight,omitempty"`
	AMQP            string        `json:"amqp,omitempty"`
	NATS            string        `json:"nats,omitempty"`
	LogFormat       string        `json:"log_format,omitempty"`
	LogLevel        string        `json:"log_level,omitempty"`
	TLSCert         string        `json:"tls_cert,omitempty"`
	TLSKey          string        `json:"tls_key,omitempty"`
	Insecure        bool          `json:"insecure,omitempty"`
	// AllowPrivateTargets lets every app call loopback, private and
	// link-local addresses. Unset: on only in local development mode (no
	// tokens configured and a loopback listener).
	AllowPrivateTargets *bool `json:"allow_private_targets,omitempty"`
	// AdminTokens are SHA-256 hex digests of bearer tokens that reach every
	// app.
	AdminTokens []string `json:"admin_tokens,omitempty"`
	// Cluster mode: the SQL task library, Redis, and their sizing.
	SQL         []string      `json:"sql,omitempty"`
	Redis       []string      `json:"redis,omitempty"`
	RedisPrefix string        `json:"redis_prefix,omitempty"`
	SQLTables   int           `json:"sql_tables,omitempty"`
	Slots       int           `json:"slots,omitempty"`
	HotWindow   task.Duration `json:"hot_window,omitempty"`
	// Defaults apply to apps not declared under Apps, and fill the fields a
	// declared app leaves out.
	Defaults App            `json:"defaults,omitempty"`
	Apps     map[string]App `json:"apps,omitempty"`
}

// App is one app's settings.
type App struct {
	// Target is the default target of the app's tasks (used when a create
	// gives none).
	Target *task.Target `json:"target,omitempty"`
	// Retry is the app's default retry policy; a task's own fields win.
	Retry      task.RetryPolicy `json:"retry,omitempty"`
	MaxPayload int              `json:"max_payload,omitempty"`
	Rate       Rate             `json:"rate,omitempty"`
	// Tokens are SHA-256 hex digests of bearer tokens that reach this app.
	Tokens []string `json:"tokens,omitempty"`
	// SigningSecrets sign the app's webhooks; the first one signs, all
	// verify (so a secret can be rotated).
	SigningSecrets      []string `json:"signing_secrets,omitempty"`
	AllowPrivateTargets *bool    `json:"allow_private_targets,omitempty"`
	AllowedHosts        []string `json:"allowed_hosts,omitempty"`
}

// Rate limits an app. Zero means unlimited (MaxInFlight: the server's
// default share).
type Rate struct {
	DeliveriesPerSecond float64 `json:"deliveries_per_second,omitempty"`
	Burst               int     `json:"burst,omitempty"`
	MaxInFlight         int     `json:"max_in_flight,omitempty"`
	CreatesPerSecond    float64 `json:"creates_per_second,omitempty"`
}

// Error says which field of the file is wrong.
type Error struct {
	Path  string // the file
	Field string // like "apps.shop.rate.burst"
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("config %s: %s", e.Path, e.Msg)
	}
	return fmt.Sprintf("config %s: %s: %s", e.Path, e.Field, e.Msg)
}

// Load reads and validates the file at path.
func Load(path string) (*File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, raw)
}

// Parse decodes and validates a configuration; path is only for messages.
func Parse(path string, raw []byte) (*File, error) {
	// YAML → generic value → JSON → File, so the file shares the API's
	// field names and decoders (targets, durations) with no second set of
	// tags, and unknown fields are refused by encoding/json.
	var generic any
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&generic); err != nil {
		if errors.Is(err, io.EOF) { // an empty file
			generic = map[string]any{}
		} else {
			return nil, &Error{Path: path, Msg: "not valid YAML: " + err.Error()}
		}
	}
	if generic == nil {
		generic = map[string]any{}
	}
	js, err := json.Marshal(normalize(generic))
	if err != nil {
		return nil, &Error{Path: path, Msg: "cannot be read as settings: " + err.Error()}
	}
	var f File
	jd := json.NewDecoder(bytes.NewReader(js))
	jd.DisallowUnknownFields()
	if err := jd.Decode(&f); err != nil {
		return nil, &Error{Path: path, Msg: jsonMsg(err)}
	}
	if err := f.Validate(); err != nil {
		var ce *Error
		if errors.As(err, &ce) {
			ce.Path = path
		}
		return nil, err
	}
	return &f, nil
}

// normalize turns YAML's map[any]any (non-string keys) into JSON-able maps.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = normalize(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
		return x
	}
	return v
}

func jsonMsg(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("%s: must be a %s, got %s", te.Field, te.Type, te.Value)
	}
	s := err.Error()
	if f, ok := strings.CutPrefix(s, "json: unknown field "); ok {
		return "unknown field " + f
	}
	return strings.TrimPrefix(s, "json: ")
}

// Validate checks every field and names the first bad one.
func (f *File) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &Error{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if f.MaxPayload < 0 {
		return bad("max_payload", "must not be negative")
	}
	if f.LogFormat != "" && f.LogFormat != "text" && f.LogFormat != "json" {
		return bad("log_format", "must be text or json")
	}
	if (f.TLSCert == "") != (f.TLSKey == "") {
		return bad("tls_cert", "tls_cert and tls_key go together")
	}
	for i, d := range f.AdminTokens {
		if !isDigest(d) {
			return bad(fmt.Sprintf("admin_tokens[%d]", i), "must be the SHA-256 hex digest of a token (64 hex digits), never the token itself; `printf %%s TOKEN | sha256sum` makes one")
		}
	}
	if err := f.Defaults.validate("defaults", false); err != nil {
		return err
	}
	names := make([]string, 0, len(f.Apps))
	for name := range f.Apps {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := task.ValidateApp(name); err != nil {
			return bad("apps."+name, "is not a valid app name: [a-z0-9][a-z0-9._-]{0,63}")
		}
		a := f.Apps[name]
		if err := a.validate("apps."+name, true); err != nil {
			return err
		}
	}
	return nil
}

func (a *App) validate(prefix string, declared bool) error {
	bad := func(field, format string, args ...any) error {
		return &Error{Field: prefix + "." + field, Msg: fmt.Sprintf(format, args...)}
	}
	if a.Target != nil {
		if err := a.Target.Validate(); err != nil {
			var fe *task.FieldError
			if errors.As(err, &fe) {
				return bad(fe.Field, "%s", fe.Message)
			}
			return bad("target", "%v", err)
		}
		if a.Target.Pull == nil && a.Target.HTTP == nil && a.Target.AMQP == nil && a.Target.NATS == nil {
			return bad("target", "needs one kind")
		}
	}
	if err := a.Retry.Validate(); err != nil {
		var fe *task.FieldError
		if errors.As(err, &fe) {
			return bad(fe.Field, "%s", fe.Message)
		}
		return bad("retry", "%v", err)
	}
	if a.MaxPayload < 0 {
		return bad("max_payload", "must not be negative")
	}
	r := a.Rate
	switch {
	case r.DeliveriesPerSecond < 0:
		return bad("rate.deliveries_per_second", "must not be negative")
	case r.Burst < 0:
		return bad("rate.burst", "must not be negative")
	case r.MaxInFlight < 0:
		return bad("rate.max_in_flight", "must not be negative")
	case r.CreatesPerSecond < 0:
		return bad("rate.creates_per_second", "must not be negative")
	}
	for i, d := range a.Tokens {
		if !isDigest(d) {
			return bad(fmt.Sprintf("tokens[%d]", i), "must be the SHA-256 hex digest of a token (64 hex digits), never the token itself")
		}
	}
	if !declared && len(a.Tokens) > 0 {
		return bad("tokens", "belong to a declared app (apps.<name>.tokens), not to defaults")
	}
	for i, s := range a.SigningSecrets {
		if len(s) < 16 {
			return bad(fmt.Sprintf("signing_secrets[%d]", i), "is shorter than 16 characters")
		}
	}
	for i, h := range a.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/ ") {
			return bad(fmt.Sprintf("allowed_hosts[%d]", i), "must be a host name or IP address")
		}
	}
	return nil
}

func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// Tokens reports whether any token (admin or app) is configured.
func (f *File) Tokens() bool {
	if len(f.AdminTokens) > 0 {
		return true
	}
	for _, a := range f.Apps {
		if len(a.Tokens) > 0 {
			return true
		}
	}
	return false
}

// Effective returns the settings that apply to app: its own, with the
// fields it leaves out taken from Defaults. An undeclared app gets Defaults.
func (f *File) Effective(app string) App {
	a, ok := f.Apps[app]
	d := f.Defaults
	if !ok {
		return d
	}
	if a.Target == nil {
		a.Target = d.Target
	}
	if a.Retry.MaxAttempts == 0 {
		a.Retry.MaxAttempts = d.Retry.MaxAttempts
	}
	if a.Retry.MinBackoff == 0 {
		a.Retry.MinBackoff = d.Retry.MinBackoff
	}
	if a.Retry.MaxBackoff == 0 {
		a.Retry.MaxBackoff = d.Retry.MaxBackoff
	}
	if a.MaxPayload == 0 {
		a.MaxPayload = d.MaxPayload
	}
	if a.Rate == (Rate{}) {
		a.Rate = d.Rate
	}
	if a.SigningSecrets == nil {
		a.SigningSecrets = d.SigningSecrets
	}
	if a.AllowPrivateTargets == nil {
		a.AllowPrivateTargets = d.AllowPrivateTargets
	}
	if a.AllowedHosts == nil {
		a.AllowedHosts = d.AllowedHosts
	}
	return a
}
