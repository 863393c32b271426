// Package httpsink delivers tasks by POSTing their payload to a URL.
//
// # Signatures
//
// When [Config.Secrets] gives an app secrets, every push of the app is
// signed twice by default ([Config.Signature] picks one): the Standard
// Webhooks headers (webhook-id: the task id, webhook-timestamp,
// webhook-signature: one v1 per secret; [client.SignStandard]), which the
// specification's libraries verify in many languages, and a
// [HeaderSignature] header made by [client.Sign] with the first secret,
// over the body and the [HeaderTaskID] and [HeaderAttempt] values sent.
// [client.Verify] checks either.
//
// # Credentials in target URLs
//
// A target URL may carry a user and password (https://user:pass@host/).
// Errors show the URL with the password masked by [url.URL.Redacted], as
// they end up in the task's last error.
//
// # Internal addresses
//
// When [Config.Guard] is set, a push connects only to addresses the app's
// [netguard.Policy] permits, checked on the resolved address at connect
// time. Each distinct policy has its own connection pool, so a connection
// opened for an app that may call internal addresses never serves an app
// that may not; apps with the same policy share connections.
package httpsink

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/maphash"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/netguard"
	"github.com/toc-dev/toc/internal/sink"
	"github.com/toc-dev/toc/internal/telemetry"
	"github.com/toc-dev/toc/task"
)

// Headers toc sets on every push: package sink's names, and the signature.
const (
	HeaderTaskID  = sink.HeaderTaskID
	HeaderApp     = sink.HeaderApp
	HeaderKey     = sink.HeaderKey
	HeaderAttempt = sink.HeaderAttempt
	HeaderDueAt   = sink.HeaderDueAt
	// HeaderScheduleID is set on occurrences of a schedule only.
	HeaderScheduleID = sink.HeaderScheduleID
	// HeaderSignature is set when the app has secrets: see [client.Sign].
	HeaderSignature = client.HeaderSignature
)

// MaxIdleConnsPerHostDefault is how many idle connections to one receiver
// the default client keeps unless told ([Config.MaxIdleConnsPerHost]): the
// engine's default MaxInFlight.
const MaxIdleConnsPerHostDefault = 1024

// MaxResponseBody is how much of a response body is read (and kept for the
// error message of a failed attempt); the rest is discarded.
const MaxResponseBody = 4 << 10

// Signature schemes of [Config.Signature].
const (
	// SignatureBoth sends the Standard Webhooks headers and HeaderSignature.
	SignatureBoth = "both"
	// SignatureStandard sends the Standard Webhooks headers only.
	SignatureStandard = "standard"
	// SignatureToc sends HeaderSignature only (toc's own, which also
	// covers the attempt number).
	SignatureToc = "toc"
)

// Config configures a Sink.
type Config struct {
	// Client sends the requests. Default: a client whose transport keeps
	// connections alive (MaxIdleConnsPerHost to each receiver),
	// speaks HTTP/2 to receivers that offer it over TLS, and does not
	// follow redirects (a redirect is a failed attempt). With Guard set,
	// its Transport must be nil or an *http.Transport without DialTLS or
	// DialTLSContext (New panics otherwise), and is copied once per policy.
	Client *http.Client
	// MaxIdleConnsPerHost is how many idle connections to one receiver
	// the default client keeps (unused with Client set): the most pushes
	// the engine runs at once (engine.Config.MaxInFlight), so that a burst
	// to one receiver reuses its connections instead of closing and
	// redialling them. Default MaxIdleConnsPerHostDefault.
	MaxIdleConnsPerHost int
	// MinConnsPerHost is the fewest pushes to one receiver (scheme and
	// host) that run at once when more wait: the limit grows with the
	// receiver's latency and the rate of pushes, up to MaxIdleConnsPerHost
	// (see connlimit.go). Default [MinConnsPerHostDefault]; negative: no
	// limit (each push up to MaxIdleConnsPerHost takes its own connection).
	MinConnsPerHost int
	// UserAgent is sent with every push. Default "toc".
	UserAgent string
	// Secrets returns the webhook signing secrets of an app, the one to sign
	// with first (list two while rotating: receivers accept either, toc
	// signs with the new one); empty strings are skipped. Nil, or no
	// secrets for an app, sends its pushes unsigned. It is called for every
	// push, so it should be cheap.
	Secrets func(app string) []string
	// Signature returns how an app's pushes are signed when it has
	// secrets: [SignatureStandard], [SignatureToc] or [SignatureBoth]
	// (also for "" or a nil func, the default). Called for every push.
	Signature func(app string) string
	// Guard returns the policy that says which internal addresses an app's
	// pushes may connect to. Nil allows every address. With Guard set,
	// connections never go through a proxy (the transport's Proxy is
	// ignored), so that the check sees the target's own address. It is
	// called for every push, so it should be cheap.
	Guard func(app string) netguard.Policy
	// Resolver looks up target hosts when Guard is set. Default
	// net.DefaultResolver.
	Resolver netguard.Resolver
	// Clock dates the signatures: the engine's (a test clock signs with
	// its time). Default: the wall clock.
	Clock clock.Clock
}

// Sink POSTs a task's payload to its target URL. It is safe for concurrent
// use.
type Sink struct {
	client *http.Client // every push when guard is nil; the template otherwise
	// direct says client is New's own (Config.Client nil): pushes go to its
	// transport's RoundTrip, without http.Client's per-request work (a copy
	// of the headers kept for redirects it would not follow, a copy of the
	// URL); send does what else the client did.
	direct    bool
	userAgent string
	secrets   func(app string) []string
	signature func(app string) string
	guard     func(app string) netguard.Policy
	resolver  netguard.Resolver
	clock     clock.Clock
	macs      macCache
	targets   *targetCache
	ts        atomic.Pointer[unixText] // the signing time's text, made once a second

	// noHosts is the pool of each policy without AllowedHosts, indexed by
	// AllowPrivate (0 false, 1 true): the same clients as mu.guarded's,
	// found without a lock or a key. Set by clientForPolicy.
	noHosts [2]atomic.Pointer[http.Client]

	mu struct {
		sync.Mutex
		guarded map[string]*http.Client // by netguard.Policy.Key
	}
}

var _ sink.Sink = (*Sink)(nil)

// New returns a Sink.
func New(cfg Config) *Sink {
	c := cfg.Client
	if c == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// Keep as many idle connections to a receiver as attempts may run
		// at once (Config.MaxIdleConnsPerHost): with fewer, a burst closes
		// and redials connections on every attempt.
		tr.MaxIdleConnsPerHost = cmp.Or(max(cfg.MaxIdleConnsPerHost, 0), MaxIdleConnsPerHostDefault)
		tr.MaxIdleConns = 4 * tr.MaxIdleConnsPerHost
		// HTTP/2 with receivers that offer it over TLS: many pushes share
		// one connection. (DefaultTransport has it; a transport with a
		// TLS config or dialer of its own, as Guard's pools are, needs it
		// said.)
		tr.ForceAttemptHTTP2 = true
		c = &http.Client{
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	if cfg.Guard != nil {
		switch tr := c.Transport.(type) {
		case nil:
		case *http.Transport:
			if tr.DialTLSContext != nil || tr.DialTLS != nil {
				panic("httpsink: Config.Guard cannot check connections made by the transport's DialTLSContext or DialTLS")
			}
		default:
			panic(fmt.Sprintf("httpsink: Config.Guard needs Config.Client.Transport to be an *http.Transport or nil, not %T", tr))
		}
	}
	s := &Sink{
		client:    c,
		direct:    cfg.Client == nil,
		targets:   &targetCache{seed: maphash.MakeSeed(), limits: connLimitsOf(cfg)},
		userAgent: cmp.Or(cfg.UserAgent, "toc"),
		secrets:   cfg.Secrets,
		signature: cfg.Signature,
		guard:     cfg.Guard,
		resolver:  cfg.Resolver,
	}
	s.mu.guarded = make(map[string]*http.Client)
	s.clock = clock.Or(cfg.Clock)
	return s
}

// connLimitsOf is the receivers' limits of a sink configured by cfg; nil
// for none.
func connLimitsOf(cfg Config) *connLimits {
	if cfg.MinConnsPerHost < 0 {
		return nil
	}
	most := cmp.Or(max(cfg.MaxIdleConnsPerHost, 0), MaxIdleConnsPerHostDefault)
	return &connLimits{min: min(cmp.Or(cfg.MinConnsPerHost, MinConnsPerHostDefault), most), max: most}
}

// clientFor returns the client that sends app's pushes: under Guard, the
// one of the app's policy.
func (s *Sink) clientFor(app string) *http.Client {
	if s.guard == nil {
		return s.client
	}
	p := s.guard(app)
	if len(p.AllowedHosts) == 0 {
		if c := s.noHosts[b2i(p.AllowPrivate)].Load(); c != nil {
			return c
		}
	}
	return s.clientForPolicy(p)
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// clientForPolicy returns the client of policy p, made on first use.
func (s *Sink) clientForPolicy(p netguard.Policy) *http.Client {
	key := p.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.mu.guarded[key]; ok {
		return c
	}
	var tr *http.Transport
	if t, ok := s.client.Transport.(*http.Transport); ok {
		tr = t.Clone()
	} else { // nil, as New checked
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	var dialer netguard.Dialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if tr.DialContext != nil {
		dialer = dialFunc(tr.DialContext)
	}
	tr.DialContext = p.DialContext(s.resolver, dialer)
	tr.Proxy = nil
	c := *s.client
	c.Transport = tr
	s.mu.guarded[key] = &c
	if len(p.AllowedHosts) == 0 {
		s.noHosts[b2i(p.AllowPrivate)].Store(&c)
	}
	return &c
}

// signAt sets the signature headers of a push of t at signing time now
// (see the package doc): none when t's app has no secret. A test's entry
// to signInto.
func (s *Sink) signAt(h http.Header, t *task.Task, taskID string, now time.Time) {
	hb := headerBuilder{h: h}
	_ = s.signInto(&hb, t, s.secretsOf(t.App), taskID, now, nil)
}

// secretsOf returns the secrets app's pushes are signed with: nil when
// none is set.
func (s *Sink) secretsOf(app string) []string {
	if s.secrets == nil {
		return nil
	}
	secrets := s.secrets(app)
	for _, secret := range secrets {
		if secret != "" {
			return secrets
		}
	}
	return nil
}

// signInto sets the signature headers of a push of t through hb, at
// signing time now, with secrets (secretsOf: none when nil), and returns
// b with the signatures appended, as a string (b as it is when there are
// none): a caller puts other text of the push before them in b, to make
// them all one string. The values are those of [client.SignStandard] and
// [client.Sign], byte for byte; the keyed HMACs are made once per secret
// and reused (macs), and the timestamp's text once a second (unixText).
func (s *Sink) signInto(hb *headerBuilder, t *task.Task, secrets []string, taskID string, now time.Time, b []byte) string {
	first := ""
	for _, secret := range secrets {
		if secret != "" {
			first = secret
			break
		}
	}
	if first == "" {
		return string(b)
	}
	scheme := SignatureBoth
	if s.signature != nil {
		scheme = cmp.Or(s.signature(t.App), SignatureBoth)
	}
	ts := s.unixText(now)
	start := len(b)
	if scheme != SignatureToc {
		// One "v1,<base64 of HMAC(key, id.ts.body)>" per secret.
		for _, secret := range secrets {
			if secret == "" {
				continue
			}
			if len(b) > start {
				b = append(b, ' ')
			}
			b = append(b, "v1,"...)
			sum := s.macs.sum(secret, msgHead{taskID, ts, ""}, t.Payload)
			b = base64.StdEncoding.AppendEncode(b, sum[:])
		}
	}
	standard := len(b)
	if scheme != SignatureStandard {
		// "t=<ts>,v1=<hex of HMAC(key, ts.id.attempt.body)>"
		sum := s.macs.sum(first, msgHead{ts, taskID, strconv.Itoa(t.Attempts)}, t.Payload)
		b = append(append(append(b, "t="...), ts...), ",v1="...)
		b = hex.AppendEncode(b, sum[:])
	}
	all := string(b)
	if scheme != SignatureToc {
		hb.set(keyWebhookID, taskID)
		hb.set(keyWebhookTimestamp, ts)
		hb.set(keyWebhookSignature, all[start:standard])
	}
	if scheme != SignatureStandard {
		hb.set(HeaderSignature, all[standard:])
	}
	return all
}

// unixText is a Unix time in seconds and its decimal text.
type unixText struct {
	sec  int64
	text string
}

// unixText returns now's Unix time in seconds as text, formatted once a
// second (or when now goes back) and kept in s.ts.
func (s *Sink) unixText(now time.Time) string {
	sec := now.Unix()
	if c := s.ts.Load(); c != nil && c.sec == sec {
		return c.text
	}
	c := &unixText{sec: sec, text: strconv.FormatInt(sec, 10)}
	s.ts.Store(c)
	return c.text
}

// msgHead is the parts of a signed message before the body, each followed
// by a '.': a, b, and c when not empty.
type msgHead struct{ a, b, c string }

// The Standard Webhooks header names as http.Header keys them.
var (
	keyWebhookID        = textproto.CanonicalMIMEHeaderKey(client.HeaderWebhookID)
	keyWebhookTimestamp = textproto.CanonicalMIMEHeaderKey(client.HeaderWebhookTimestamp)
	keyWebhookSignature = textproto.CanonicalMIMEHeaderKey(client.HeaderWebhookSignature)
)

// macCache holds keyed HMAC-SHA256s, one pool per secret, so that a push
// does not derive the key (a base64 decoding and two SHA-256 blocks) again.
type macCache struct {
	mu struct {
		sync.Mutex
		pools map[string]*sync.Pool
	}
}

// macCacheMax bounds the secrets macCache keeps (old ones of rotations
// are dropped with the rest when it is full).
const macCacheMax = 4096

// hmacState is a keyed HMAC, a buffer for the message's head and one for
// the sum (which Sum would otherwise allocate, the hash being an
// interface).
type hmacState struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// sum returns HMAC-SHA256(client.SecretKey(secret), head + body), as
// client.Sign and client.SignStandard compute it.
func (c *macCache) sum(secret string, head msgHead, body []byte) [sha256.Size]byte {
	p := c.pool(secret)
	st := p.Get().(*hmacState)
	st.h.Reset()
	st.buf = append(st.buf[:0], head.a...)
	st.buf = append(st.buf, '.')
	st.buf = append(st.buf, head.b...)
	st.buf = append(st.buf, '.')
	if head.c != "" {
		st.buf = append(st.buf, head.c...)
		st.buf = append(st.buf, '.')
	}
	st.h.Write(st.buf)
	st.h.Write(body)
	st.h.Sum(st.sum[:0])
	out := st.sum
	p.Put(st)
	return out
}

// pool returns the pool of HMACs keyed by secret.
func (c *macCache) pool(secret string) *sync.Pool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.mu.pools[secret]; ok {
		return p
	}
	if c.mu.pools == nil || len(c.mu.pools) >= macCacheMax {
		c.mu.pools = make(map[string]*sync.Pool)
	}
	key := client.SecretKey(secret)
	p := &sync.Pool{New: func() any { return &hmacState{h: hmac.New(sha256.New, key)} }}
	c.mu.pools[secret] = p
	return p
}

// dialFunc adapts a transport's DialContext to a [netguard.Dialer].
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (f dialFunc) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}

// CloseIdleConnections closes the idle connections of every pool the Sink
// keeps, as [http.Client.CloseIdleConnections] does.
func (s *Sink) CloseIdleConnections() {
	s.client.CloseIdleConnections()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.mu.guarded {
		c.CloseIdleConnections()
	}
}

// Deliver POSTs t.Payload to t.Target.HTTP.URL with the toc headers and the
// target's own, signed when the app has secrets. A 2xx answer is success;
// anything else is an error. A connection the app's policy refuses is an
// error that wraps a [*netguard.BlockedError].
func (s *Sink) Deliver(ctx context.Context, t *task.Task) error {
	h := t.Target.HTTP
	if h == nil {
		return fmt.Errorf("httpsink: task %s has no http target", t.ID)
	}
	tg, err := s.targets.get(h.URL)
	if err != nil {
		// A *url.Error quotes the raw URL, and its cause may quote a piece
		// of it (a port, an escape) that could be part of a password.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
			if strings.Contains(h.URL, "@") {
				err = errors.New("malformed URL")
			}
		}
		return fmt.Errorf("build request for POST %s: %w", redactRaw(h.URL), err)
	}
	timeout := cmp.Or(h.Timeout.Std(), task.DefaultHTTPTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// The request as http.NewRequestWithContext makes it, on the target's
	// parsed URL (GetBody lets the transport send it again on a fresh
	// connection when a pooled one turns out closed before anything was
	// written). WithContext is the one way to set its context: it copies
	// r, which stays on the stack.
	r := http.Request{
		Method: http.MethodPost, URL: tg.u, Host: tg.u.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: s.header(ctx, t, tg),
		Body:   http.NoBody, GetBody: noBody,
	}
	if p := t.Payload; len(p) > 0 {
		r.Body = io.NopCloser(bytes.NewReader(p))
		r.ContentLength = int64(len(p))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(p)), nil }
	}
	req := r.WithContext(ctx)

	var answered time.Duration // the receiver's answer time, for the limit
	if l := tg.limit; l != nil {
		if err := l.acquire(ctx, t.App); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("POST %s: no answer within %s (all of it waiting for a connection to the receiver)", redactURL(req.URL), timeout)
			}
			return fmt.Errorf("POST %s: %w", redactURL(req.URL), err)
		}
		// Released once the answer is read and the connection is back in
		// the pool (the deferred Body.Close below runs first).
		defer func() { l.release(answered) }()
	}
	sent := time.Now()
	resp, err := s.send(s.clientFor(t.App), req)
	if err == nil {
		answered = time.Since(sent)
	}
	// The URL as errors show it.
	target := func() string { return redactURL(req.URL) }
	if err != nil {
		var be *netguard.BlockedError
		if errors.As(err, &be) {
			return fmt.Errorf("POST %s: %w", target(), be)
		}
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("POST %s: no answer within %s", target(), timeout)
		}
		// The *url.Error of http.Client quotes the URL again, in a form of
		// its own: keep only its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("POST %s: %w", target(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		// Drain the answer so the connection can be reused; give up on
		// huge bodies.
		discard(resp.Body, MaxResponseBody+64<<10)
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBody))
	// Drain a little more so the connection can be reused; give up on huge bodies.
	discard(resp.Body, 64<<10)
	msg := fmt.Sprintf("POST %s: %s", target(), resp.Status)
	if len(bytes.TrimSpace(body)) > 0 {
		snippet := body
		if len(snippet) > 200 {
			// Cut on a character boundary: an error is text that is
			// stored, shown as JSON and printed.
			n := 200
			for n > 0 && !utf8.RuneStart(snippet[n]) {
				n--
			}
			snippet = snippet[:n]
		}
		msg += ": " + strings.ToValidUTF8(string(bytes.TrimSpace(snippet)), "\uFFFD")
	}
	return &StatusError{Code: resp.StatusCode, msg: msg}
}

// noBody is the GetBody of a push without a payload.
func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// send sends req with c: through c.Do with a client of the caller's, and
// straight to the transport with New's own (s.direct), doing what else
// c.Do would: the Basic authorization of the URL's user (header sets it),
// and its error for a plain-HTTP answer to HTTPS. That client follows no
// redirect (a 3xx is the answer, as here) and has no cookie jar or
// timeout, and the transport's dialer (Guard's) checks every connection
// either way.
func (s *Sink) send(c *http.Client, req *http.Request) (*http.Response, error) {
	if !s.direct {
		return c.Do(req)
	}
	resp, err := c.Transport.RoundTrip(req)
	if err != nil {
		var re tls.RecordHeaderError
		if errors.As(err, &re) && string(re.RecordHeader[:]) == "HTTP/" {
			err = http.ErrSchemeMismatch
		}
		return nil, err
	}
	return resp, nil
}

// discardBuf is a buffer of discard's.
type discardBuf [2 << 10]byte

var discardPool = sync.Pool{New: func() any { return new(discardBuf) }}

// discard reads r to its end, or up to limit bytes, so that its connection
// can be reused.
func discard(r io.Reader, limit int) {
	if r == http.NoBody {
		return
	}
	buf := discardPool.Get().(*discardBuf)
	defer discardPool.Put(buf)
	for n := 0; n < limit; {
		m, err := r.Read(buf[:min(len(buf), limit-n)])
		n += m
		if err != nil {
			return
		}
	}
}

// header returns the headers of a push of t to tg, signed: the target's,
// then toc's (which win over the target's of the same name), then the
// Basic authorization of the URL's user when no Authorization is set (as
// http.Client sets it). The Content-Type, when the target sets none, is
// JSON's for a payload that is JSON. The values share one backing array,
// toc's names are set as they are (canonical already), and the due time
// and the signatures are one string, to spare a push a dozen small
// allocations. The trace context (traceparent, tracestate) is the
// attempt's span's, or the one t was created in while tracing is off
// (telemetry.Outgoing): none when t has none.
func (s *Sink) header(ctx context.Context, t *task.Task, tg *target) http.Header {
	h := t.Target.HTTP
	// Sized for what it will hold (a map of up to 8 needs no table):
	// Content-Type, User-Agent, the id, app, attempt and due time, the
	// key, the schedule, a trace context, Basic authorization and 4 of
	// signatures when there are.
	n := len(h.Headers) + 6
	if t.Key != "" {
		n++
	}
	if !t.ScheduleID.IsZero() {
		n++
	}
	if t.Trace != nil || telemetry.On() {
		n += 2
	}
	if tg.auth != "" {
		n++
	}
	secrets := s.secretsOf(t.App)
	if secrets != nil {
		n += 4
	}
	hb := headerBuilder{h: make(http.Header, n), vals: make([]string, 0, n)}
	for k, v := range h.Headers {
		hb.set(textproto.CanonicalMIMEHeaderKey(k), v)
	}
	if len(hb.h["Content-Type"]) == 0 || hb.h["Content-Type"][0] == "" {
		if sink.IsJSON(t.Payload) {
			hb.set("Content-Type", "application/json")
		} else {
			hb.set("Content-Type", "application/octet-stream")
		}
	}
	hb.set("User-Agent", s.userAgent)
	taskID := t.ID.String()
	hb.set(HeaderTaskID, taskID)
	hb.set(HeaderApp, t.App)
	if t.Key != "" {
		hb.set(HeaderKey, t.Key)
	}
	if !t.ScheduleID.IsZero() {
		hb.set(HeaderScheduleID, t.ScheduleID.String())
	}
	// client.Sign formats the attempt as strconv.Itoa does, so the
	// signature covers the header value sent.
	hb.set(HeaderAttempt, strconv.Itoa(t.Attempts))
	// The due time, then the signatures: one string.
	var scratch [256]byte
	b := t.DueAt.UTC().AppendFormat(scratch[:0], time.RFC3339Nano)
	dueLen := len(b)
	var now time.Time // the signing time
	if secrets != nil {
		now = s.clock.Now()
	}
	text := s.signInto(&hb, t, secrets, taskID, now, b)
	hb.set(HeaderDueAt, text[:dueLen])
	if tp, ts := telemetry.Outgoing(ctx, t); tp != "" {
		hb.set("Traceparent", tp)
		if ts != "" {
			hb.set("Tracestate", ts)
		}
	}
	if tg.auth != "" {
		if a := hb.h["Authorization"]; len(a) == 0 || a[0] == "" {
			hb.set("Authorization", tg.auth)
		}
	}
	return hb.h
}

// headerBuilder sets header values that share one backing array.
type headerBuilder struct {
	h    http.Header
	vals []string
}

// set sets h[k] to v alone; k must be canonical.
func (hb *headerBuilder) set(k, v string) {
	hb.vals = append(hb.vals, v)
	n := len(hb.vals)
	hb.h[k] = hb.vals[n-1 : n : n]
}

// target is what every push to one URL starts from, made once.
type target struct {
	url string // as the task gives it
	// u is url parsed as http.NewRequest parses it (its host's empty port
	// dropped); the requests of every push share it and never change it.
	u *url.URL
	// auth is the Basic authorization of the URL's user ("" for none), as
	// http.Client would set it.
	auth string
	// limit bounds the pushes under way to the URL's receiver (nil: no
	// bound).
	limit *connLimit
}

// targetCache holds the targets of the URLs pushed to lately, one per
// slot of a URL's hash (a URL displaces another of its slot), so that a
// URL's first push, or one of URLs that each get one push, allocates no
// more than it did without the cache (BenchmarkDeliverUniqueURLs): a parse,
// as before, and a pointer stored.
type targetCache struct {
	seed   maphash.Seed
	slots  [targetSlots]atomic.Pointer[target]
	limits *connLimits // nil: pushes are not limited
}

// targetSlots is how many targets targetCache holds at most.
const targetSlots = 1024

// get returns the target of rawURL; a URL that cannot be parsed is an
// error (*url.Error, as http.NewRequest returns).
func (c *targetCache) get(rawURL string) (*target, error) {
	slot := &c.slots[maphash.String(c.seed, rawURL)%targetSlots]
	if tg := slot.Load(); tg != nil && tg.url == rawURL {
		return tg, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	// The host's empty port dropped, as http.NewRequest does.
	if strings.LastIndex(u.Host, ":") > strings.LastIndex(u.Host, "]") {
		u.Host = strings.TrimSuffix(u.Host, ":")
	}
	tg := &target{url: rawURL, u: u}
	if c.limits != nil {
		tg.limit = c.limits.of(u.Scheme + "://" + u.Host)
	}
	if ui := u.User; ui != nil {
		pw, _ := ui.Password()
		tg.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(ui.Username()+":"+pw))
	}
	slot.Store(tg)
	return tg, nil
}

// StatusError is a non-2xx answer from the receiver.
type StatusError struct {
	Code int
	msg  string
}

func (e *StatusError) Error() string { return e.msg }

// redactURL is u as errors and logs show it: the password masked as by
// [url.URL.Redacted], and the query's values too, since callback URLs
// often carry a token there (?token=…, ?sig=…); the names stay, to tell
// the URL apart.
func redactURL(u *url.URL) string {
	if u.RawQuery == "" {
		return u.Redacted()
	}
	c := *u
	q := c.Query()
	for k, vs := range q {
		for i := range vs {
			vs[i] = "xxxxx"
		}
		q[k] = vs
	}
	c.RawQuery = q.Encode()
	return c.Redacted()
}

// redactRaw masks what may be credentials in rawURL, which [url.Parse]
// refused and so cannot be redacted field by field: everything between
// the scheme and the last "@", user name included, and the whole query.
func redactRaw(rawURL string) string {
	if q := strings.IndexByte(rawURL, '?'); q >= 0 {
		rawURL = rawURL[:q+1] + "xxxxx"
	}
	at := strings.LastIndex(rawURL, "@")
	if at < 0 {
		return rawURL
	}
	start := 0
	if i := strings.Index(rawURL, "://"); i >= 0 && i+3 <= at {
		start = i + 3
	}
	return rawURL[:start] + "xxxxx" + rawURL[at:]
}
