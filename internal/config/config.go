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
//	    max_schedules: 1000
//	    rate: {deliveries_per_second: 200, burst: 50, max_in_flight: 64, creates_per_second: 1000}
//	    weight: 2
//	    tokens: [<sha256 hex>]
//	    signing_secrets: [whsec_<base64 key>, previous-secret]
//	    signature: both     # standard | toc | both
//	    allow_private_targets: false
//	    allowed_hosts: [receiver.internal]
//	    allowed_brokers: [orders]
//	brokers:
//	  orders: amqp://toc:secret@rabbit.internal:5672/orders
//
// # Brokers
//
// The url of an amqp or nats target names operator infrastructure, so a
// task may only name a broker the operator allowed for its app: see
// [File.Broker].
package config

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
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
	// Brokers are the operator's RabbitMQ and NATS brokers, by name: an
	// app's allowed_brokers and its targets' url refer to them by name. The
	// URL's scheme says the kind: amqp:// or amqps:// for RabbitMQ, nats://
	// or tls:// (a comma-separated list for a cluster) for NATS.
	Brokers   map[string]string `json:"brokers,omitempty"`
	LogFormat string            `json:"log_format,omitempty"`
	LogLevel  string            `json:"log_level,omitempty"`
	TLSCert   string            `json:"tls_cert,omitempty"`
	TLSKey    string            `json:"tls_key,omitempty"`
	Insecure  bool              `json:"insecure,omitempty"`
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
	// MaxSchedules caps the app's recurring schedules: 0 (or absent) is
	// the default, 1000 (engine.MaxSchedulesDefault); -1 is no cap.
	MaxSchedules int  `json:"max_schedules,omitempty"`
	Rate         Rate `json:"rate,omitempty"`
	// Weight is how many due tasks the app takes in its turn when the
	// apps with due tasks take turns to be fired (1 to MaxWeight; 0: the
	// default, 1).
	Weight int `json:"weight,omitempty"`
	// Tokens are SHA-256 hex digests of bearer tokens that reach this app.
	Tokens []string `json:"tokens,omitempty"`
	// SigningSecrets sign the app's webhooks; the first one signs, all
	// verify (so a secret can be rotated).
	// A secret is "whsec_" + a base64 key (the Standard Webhooks form) or
	// any other string of 16 characters or more, whose bytes are the key.
	SigningSecrets []string `json:"signing_secrets,omitempty"`
	// Signature says which signatures the app's pushes carry: "standard"
	// (the Standard Webhooks headers), "toc" (Toc-Signature) or "both"
	// (the default).
	Signature           string   `json:"signature,omitempty"`
	AllowPrivateTargets *bool    `json:"allow_private_targets,omitempty"`
	AllowedHosts        []string `json:"allowed_hosts,omitempty"`
	// AllowedBrokers are the brokers the app's amqp and nats targets may
	// name besides the server's default ones (amqp, nats): names from
	// Brokers, or exact broker URLs. See [File.Broker].
	AllowedBrokers []string `json:"allowed_brokers,omitempty"`
}

// MaxWeight bounds App.Weight: an app takes at most this many due tasks in
// a turn.
const MaxWeight = 100

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
	for _, name := range slices.Sorted(maps.Keys(f.Brokers)) {
		if !task.IsBrokerName(name) {
			return bad("brokers."+name, "is not a valid broker name: 1 to %d letters, digits, '.', '_' or '-'", task.MaxBrokerNameLen)
		}
		if brokerKind(f.Brokers[name]) == "" {
			return bad("brokers."+name, "must be an amqp://, amqps://, nats:// or tls:// URL (NATS: a comma-separated list for a cluster)")
		}
	}
	if err := f.Defaults.validate("defaults", false); err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(f.Apps))
	for _, name := range names {
		if err := task.ValidateApp(name); err != nil {
			return bad("apps."+name, "is not a valid app name: [a-z0-9][a-z0-9._-]{0,63}")
		}
		a := f.Apps[name]
		if err := a.validate("apps."+name, true); err != nil {
			return err
		}
	}
	for i, b := range f.Defaults.AllowedBrokers {
		if err := f.checkAllowedBroker(b); err != nil {
			return bad(fmt.Sprintf("defaults.allowed_brokers[%d]", i), "%s", err)
		}
	}
	for _, name := range names {
		for i, b := range f.Apps[name].AllowedBrokers {
			if err := f.checkAllowedBroker(b); err != nil {
				return bad(fmt.Sprintf("apps.%s.allowed_brokers[%d]", name, i), "%s", err)
			}
		}
	}
	return f.ValidateTargets(f.AMQP, f.NATS)
}

// ValidateTargets checks that the amqp and nats targets of defaults and of
// the apps name brokers that exist and are of the right kind (see
// [File.Broker]; a broker written there is the operator's own and thereby
// allowed for the app), with amqp and nats the server's default brokers. [File.Validate] checks them
// against the file's own amqp and nats; a server whose flags set other
// defaults checks again with those.
func (f *File) ValidateTargets(amqp, nats string) error {
	check := func(prefix, app string, a App) *Error {
		t := a.Target
		if t == nil {
			return nil
		}
		var kind, ref, def string
		switch {
		case t.AMQP != nil:
			kind, ref, def = "amqp", t.AMQP.URL, amqp
		case t.NATS != nil:
			kind, ref, def = "nats", t.NATS.URL, nats
		default:
			return nil
		}
		if ref != "" && !task.IsBrokerName(ref) && brokerKind(ref) != kind {
			return &Error{Field: prefix + ".target." + kind + ".url", Msg: fmt.Sprintf("must be a %s broker URL or the name of one under brokers", kindName(kind))}
		}
		if err := f.CheckBroker(app, kind, ref, def); err != nil {
			return &Error{Field: prefix + ".target." + kind + ".url", Msg: err.Error()}
		}
		return nil
	}
	// An undeclared app has the defaults' settings ("" is never declared).
	if err := check("defaults", "", f.Defaults); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(f.Apps)) {
		prefix := "apps." + name
		if f.Apps[name].Target == nil {
			prefix = "defaults" // the app's target is the defaults' one
		}
		if err := check(prefix, name, f.Effective(name)); err != nil {
			err.Msg += " (app " + name + ")"
			return err
		}
	}
	return nil
}

// checkAllowedBroker checks one entry of allowed_brokers.
func (f *File) checkAllowedBroker(b string) error {
	if task.IsBrokerName(b) {
		if _, ok := f.Brokers[b]; !ok {
			return errors.New("names no broker under brokers")
		}
		return nil
	}
	if brokerKind(b) == "" {
		return errors.New("must be a name from brokers or an amqp://, amqps://, nats:// or tls:// URL")
	}
	return nil
}

// brokerKind says what a broker URL is for: "amqp", "nats", or "" when it
// is neither. A NATS URL may be a comma-separated list.
func brokerKind(raw string) string {
	kind := ""
	for i, part := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Host == "" {
			return ""
		}
		k := ""
		switch u.Scheme {
		case "amqp", "amqps":
			k = "amqp"
		case "nats", "tls":
			k = "nats"
		}
		if k == "" || (i > 0 && (k != kind || k == "amqp")) {
			return ""
		}
		kind = k
	}
	return kind
}

// Broker resolves the url of an amqp or nats target (kind "amqp" or
// "nats") of app's tasks, whose server default broker is def: it returns
// the URL to connect to, and whether the operator allowed app to use that
// broker. The rule:
//
//   - "" is the server's default broker def, allowed;
//   - a name stands for brokers[name], allowed when the app's
//     allowed_brokers lists the name or that URL, or it is def;
//   - a URL is itself, allowed when it is exactly def, an entry of the
//     app's allowed_brokers, or the URL of a name listed there.
//
// A name not under brokers, or a broker of the other kind, is an error. A
// broker that is not allowed is refused when a task is created; a task
// stored before the configuration changed connects to it only through the
// address guard of app's allow_private_targets and allowed_hosts.
func (f *File) Broker(app, kind, ref, def string) (rawURL string, allowed bool, err error) {
	if ref == "" {
		return def, true, nil
	}
	rawURL = ref
	if task.IsBrokerName(ref) {
		u, ok := f.Brokers[ref]
		if !ok {
			return "", false, fmt.Errorf("%q is not the name of a broker of this server", ref)
		}
		if k := brokerKind(u); k != kind {
			return "", false, fmt.Errorf("%q names a %s broker, not a %s one", ref, kindName(k), kindName(kind))
		}
		rawURL = u
	}
	if rawURL == def {
		return rawURL, true, nil
	}
	eff := f.Effective(app)
	if own := eff.targetBroker(kind); own != "" && (own == ref || own == rawURL || f.Brokers[own] == rawURL) {
		// The operator wrote this broker into the app's default target
		// (or the defaults'): the file is the operator's own, trusted.
		return rawURL, true, nil
	}
	for _, b := range eff.AllowedBrokers {
		if b == ref || b == rawURL {
			return rawURL, true, nil
		}
		if u, ok := f.Brokers[b]; ok && u == rawURL {
			return rawURL, true, nil
		}
	}
	return rawURL, false, nil
}

// targetBroker is the url (a broker name or URL) of the app's default
// target of kind, "" when it has none.
func (a App) targetBroker(kind string) string {
	switch {
	case a.Target == nil:
	case kind == "amqp" && a.Target.AMQP != nil:
		return a.Target.AMQP.URL
	case kind == "nats" && a.Target.NATS != nil:
		return a.Target.NATS.URL
	}
	return ""
}

// CheckBroker is [File.Broker] as a create sees it: nil when app may use
// the broker ref names, an error saying why not otherwise.
func (f *File) CheckBroker(app, kind, ref, def string) error {
	_, allowed, err := f.Broker(app, kind, ref, def)
	switch {
	case err != nil:
		return err
	case !allowed:
		return fmt.Errorf("is not a broker this app may use: give a broker name or URL listed in the app's allowed_brokers, or leave url out for the server's default %s broker", kindName(kind))
	}
	return nil
}

func kindName(kind string) string {
	switch kind {
	case "amqp":
		return "AMQP"
	case "nats":
		return "NATS"
	}
	return "unknown"
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
	if a.MaxSchedules < -1 {
		return bad("max_schedules", "must be a count, 0 for the default (1000) or -1 for no cap; got %d", a.MaxSchedules)
	}
	if a.Weight < 0 || a.Weight > MaxWeight {
		return bad("weight", "must be 1 to %d (0 or absent: 1)", MaxWeight)
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
		if b64, ok := strings.CutPrefix(s, "whsec_"); ok {
			key, err := base64.StdEncoding.DecodeString(b64)
			if err != nil || len(key) < 16 {
				return bad(fmt.Sprintf("signing_secrets[%d]", i), "must be whsec_ followed by a key of 16 bytes or more in standard base64 (e.g. whsec_$(head -c 32 /dev/urandom | base64))")
			}
			continue
		}
		if len(s) < 16 {
			return bad(fmt.Sprintf("signing_secrets[%d]", i), "is shorter than 16 characters")
		}
	}
	switch a.Signature {
	case "", "standard", "toc", "both":
	default:
		return bad("signature", `must be "standard", "toc" or "both", got %q`, a.Signature)
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
	if a.MaxSchedules == 0 {
		a.MaxSchedules = d.MaxSchedules
	}
	if a.Rate == (Rate{}) {
		a.Rate = d.Rate
	}
	if a.Weight == 0 {
		a.Weight = d.Weight
	}
	if a.SigningSecrets == nil {
		a.SigningSecrets = d.SigningSecrets
	}
	if a.Signature == "" {
		a.Signature = d.Signature
	}
	if a.AllowPrivateTargets == nil {
		a.AllowPrivateTargets = d.AllowPrivateTargets
	}
	if a.AllowedHosts == nil {
		a.AllowedHosts = d.AllowedHosts
	}
	if a.AllowedBrokers == nil {
		a.AllowedBrokers = d.AllowedBrokers
	}
	return a
}
