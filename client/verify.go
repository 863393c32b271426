package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HeaderSignature carries the signature of a push from toc, when its app
// has signing secrets:
//
//	Toc-Signature: t=1767225600,v1=a59cb34cdee7fbb2e8d1ae07fe0c033e96a0aca0a4b0cf3c3f84594bedec8524
//
// t is the signing time in Unix seconds and v1 the hex HMAC-SHA256, keyed
// with the secret, of
//
//	t + "." + task id + "." + attempt + "." + body
//
// where the task id and the attempt are the [HeaderTaskID] and
// [HeaderAttempt] header values of the push, so a signature vouches for
// one delivery of one task and cannot be replayed as another. [Verify]
// checks it.
const HeaderSignature = "Toc-Signature"

// Headers toc sets on every push that the signature covers.
const (
	// HeaderTaskID is the id of the task delivered, in its text form.
	HeaderTaskID = "Toc-Task-Id"
	// HeaderAttempt is the number of the delivery attempt, in decimal,
	// counted from 1.
	HeaderAttempt = "Toc-Attempt"
)

// SignatureToleranceDefault is how far the signing time of a push may be
// from the receiver's clock when [Verify] is given a tolerance of 0.
const SignatureToleranceDefault = 5 * time.Minute

// Errors of [Verify].
var (
	// ErrNoSignature: the header is empty or has no v1 signature.
	ErrNoSignature = errors.New("toc: no signature")
	// ErrBadSignature: the signature, task id or attempt header is
	// malformed, or no v1 signature matches the push under any of the
	// secrets.
	ErrBadSignature = errors.New("toc: bad signature")
	// ErrSignatureExpired: the signature matches but its time is further
	// from now than the tolerance; it may be a replay.
	ErrSignatureExpired = errors.New("toc: signature expired")
)

// Sign returns the value of the [HeaderSignature] header for the push of
// body as attempt number attempt of the task taskID, signed with secret at
// time t. taskID and attempt must be sent as the [HeaderTaskID] and
// [HeaderAttempt] headers of the same push, attempt formatted in decimal;
// [Verify] refuses a task id that is not 1 to 64 ASCII letters and digits
// (a toc task id is 26) or a negative attempt. toc calls Sign for every
// push of an app that has secrets; receivers need only [Verify], but Sign
// helps to test them.
func Sign(secret string, t time.Time, taskID string, attempt int, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, taskID, strconv.Itoa(attempt), body))
}

// Headers of the Standard Webhooks signature (standardwebhooks.com), which
// toc sends beside [HeaderSignature] (or instead of it: the app's
// signature setting):
//
//	webhook-id: 01JD8X5C2M0000ABCDEFGHJKMN
//	webhook-timestamp: 1767225600
//	webhook-signature: v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= v1,…
//
// The id is the task id, the same on every attempt, so a receiver
// deduplicates deliveries by it; the timestamp is the attempt's signing
// time in Unix seconds; each v1 is the base64 HMAC-SHA256 of
// id + "." + timestamp + "." + body, one per signing secret of the app (so
// a receiver holding either secret verifies during a rotation). Unlike
// [HeaderSignature], it does not cover the attempt number. The
// specification's libraries verify it in many languages; [Verify] does too.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// SecretPrefix marks a secret in the Standard Webhooks form: "whsec_"
// followed by the key in standard base64. A secret without it is used as it
// is: its bytes are the key. A receiver using a Standard Webhooks library
// with such a plain secret gives the library "whsec_" + base64(secret).
const SecretPrefix = "whsec_"

// SecretKey returns the HMAC key of a signing secret: the base64-decoded
// key of a "whsec_" secret, the secret's own bytes otherwise (also when
// what follows "whsec_" is not base64, which toc's configuration refuses).
func SecretKey(secret string) []byte {
	if b64, ok := strings.CutPrefix(secret, SecretPrefix); ok {
		if key, err := base64.StdEncoding.DecodeString(b64); err == nil {
			return key
		}
	}
	return []byte(secret)
}

// SignStandard returns the value of the [HeaderWebhookSignature] header of
// a push of body with [HeaderWebhookID] msgID signed at time t: one
// "v1,<base64>" per non-empty secret, separated by spaces.
func SignStandard(secrets []string, t time.Time, msgID string, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(standardMAC(s, msgID, ts, body)))
	}
	return b.String()
}

// standardMAC is HMAC-SHA256(key, msgID + "." + ts + "." + body).
func standardMAC(secret, msgID, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, SecretKey(secret))
	m.Write([]byte(msgID))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// mac is HMAC-SHA256(secret, ts + "." + taskID + "." + attempt + "." + body).
// ts and attempt are digits and taskID letters and digits, so the message
// splits back into its parts one way only.
func mac(secret, ts, taskID, attempt string, body []byte) []byte {
	m := hmac.New(sha256.New, SecretKey(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write([]byte(taskID))
	m.Write([]byte{'.'})
	m.Write([]byte(attempt))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// maxSignatureHeader bounds the header Verify parses: a few signatures fit
// many times over.
const maxSignatureHeader = 4 << 10

// Verify checks the [HeaderSignature] header of a push, given its request
// headers h and its raw body (the exact bytes received, before any
// decoding):
//
//	err := client.Verify(secrets, r.Header, body, 0)
//
// It returns nil when a v1 signature in the header matches the body, the
// [HeaderTaskID] and the [HeaderAttempt] of h under any of secrets, and the
// signing time is within tolerance of now ([SignatureToleranceDefault] when
// tolerance is 0 or less). After a nil error, the task id and attempt
// headers are the ones toc sent with this body, so a receiver may
// de-duplicate by them. Giving two secrets, the new and the old, accepts
// pushes signed with either while a secret is rotated; toc signs with the
// first of an app's secrets. Empty secrets are ignored.
//
// A push that carries no [HeaderSignature] but the Standard Webhooks
// headers ([HeaderWebhookSignature]; an app set to sign only that way) is
// checked by those instead: a v1 signature must match the body and
// [HeaderWebhookID] under one of secrets, and [HeaderWebhookTimestamp] be
// within tolerance. Secrets are given as configured in toc: "whsec_…" or
// plain (see [SecretKey]).
//
// The error is [ErrNoSignature], [ErrBadSignature] (also for a missing,
// repeated or malformed task id or attempt header) or [ErrSignatureExpired],
// possibly wrapped with detail; answer any of them with 401 and do not act
// on the body. Signatures are compared in constant time.
func Verify(secrets []string, h http.Header, body []byte, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = SignatureToleranceDefault
	}
	header := strings.TrimSpace(h.Get(HeaderSignature))
	if header == "" {
		if h.Get(HeaderWebhookSignature) != "" {
			return verifyStandard(secrets, h, body, tolerance)
		}
		return ErrNoSignature
	}
	if len(header) > maxSignatureHeader {
		return fmt.Errorf("%w: header is longer than %d bytes", ErrBadSignature, maxSignatureHeader)
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%w: malformed header: %q is not key=value", ErrBadSignature, part)
		}
		switch k {
		case "t":
			if ts != "" {
				return fmt.Errorf("%w: malformed header: more than one t", ErrBadSignature)
			}
			if !isDigits(v) {
				return fmt.Errorf("%w: malformed header: t=%q is not Unix seconds", ErrBadSignature, v)
			}
			ts = v
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				return fmt.Errorf("%w: malformed header: v1 is not %d hex digits", ErrBadSignature, 2*sha256.Size)
			}
			sigs = append(sigs, sig)
		default:
			// Another scheme (a future v2, say): not ours to check.
		}
	}
	if ts == "" {
		return fmt.Errorf("%w: malformed header: no t", ErrBadSignature)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("%w: no v1 signature in the header", ErrNoSignature)
	}
	taskID, err := singleHeader(h, HeaderTaskID)
	if err != nil {
		return err
	}
	if !isAlnum(taskID) {
		return fmt.Errorf("%w: %s is not 1 to 64 ASCII letters and digits", ErrBadSignature, HeaderTaskID)
	}
	attempt, err := singleHeader(h, HeaderAttempt)
	if err != nil {
		return err
	}
	if !isDigits(attempt) {
		return fmt.Errorf("%w: %s is not 1 to 19 decimal digits", ErrBadSignature, HeaderAttempt)
	}
	if err := matchAny(secrets, sigs, func(s string) []byte { return mac(s, ts, taskID, attempt, body) }); err != nil {
		return err
	}
	return checkTime(ts, tolerance)
}

// matchAny checks the signatures sigs against want(secret) for each
// non-empty secret: nil when one matches, [ErrBadSignature] when none does.
// Every pair is compared, so the time taken does not say which matched.
func matchAny(secrets []string, sigs [][]byte, want func(secret string) []byte) error {
	matched, keyed := false, false
	for _, s := range secrets {
		if s == "" {
			continue
		}
		keyed = true
		w := want(s)
		for _, sig := range sigs {
			if hmac.Equal(sig, w) {
				matched = true
			}
		}
	}
	if !keyed {
		return errors.New("toc: verify: no secrets to check the signature with")
	}
	if !matched {
		return ErrBadSignature
	}
	return nil
}

// checkTime checks that the signing time ts (Unix seconds, digits) is
// within tolerance of now.
func checkTime(ts string, tolerance time.Duration) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: malformed header: t=%s is out of range", ErrBadSignature, ts)
	}
	if d := time.Since(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now, more than %s", ErrSignatureExpired,
			time.Unix(sec, 0).UTC().Format(time.RFC3339), d.Round(time.Second).Abs(), tolerance)
	}
	return nil
}

// verifyStandard is [Verify] for a push that carries the Standard Webhooks
// headers and no [HeaderSignature].
func verifyStandard(secrets []string, h http.Header, body []byte, tolerance time.Duration) error {
	header := strings.TrimSpace(h.Get(HeaderWebhookSignature))
	if len(header) > maxSignatureHeader {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrBadSignature, HeaderWebhookSignature, maxSignatureHeader)
	}
	msgID, err := singleHeader(h, HeaderWebhookID)
	if err != nil {
		return err
	}
	ts, err := singleHeader(h, HeaderWebhookTimestamp)
	if err != nil {
		return err
	}
	if !isDigits(ts) {
		return fmt.Errorf("%w: %s is not Unix seconds", ErrBadSignature, HeaderWebhookTimestamp)
	}
	var sigs [][]byte
	for part := range strings.FieldsSeq(header) {
		version, b64, ok := strings.Cut(part, ",")
		if !ok || version != "v1" {
			continue // another version: not ours to check
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sig) != sha256.Size {
			return fmt.Errorf("%w: malformed %s: v1 is not a base64 HMAC-SHA256", ErrBadSignature, HeaderWebhookSignature)
		}
		sigs = append(sigs, sig)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("%w: no v1 signature in %s", ErrNoSignature, HeaderWebhookSignature)
	}
	if err := matchAny(secrets, sigs, func(s string) []byte { return standardMAC(s, msgID, ts, body) }); err != nil {
		return err
	}
	return checkTime(ts, tolerance)
}

// isDigits reports whether s is 1 to 19 ASCII digits (an int64's worth).
func isDigits(s string) bool {
	if s == "" || len(s) > 19 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// singleHeader returns the one value of the header key in h. None, or more
// than one (which a receiver might read differently than Verify does), is
// an [ErrBadSignature].
func singleHeader(h http.Header, key string) (string, error) {
	switch vs := h.Values(key); len(vs) {
	case 0:
		return "", fmt.Errorf("%w: no %s header", ErrBadSignature, key)
	case 1:
		return vs[0], nil
	default:
		return "", fmt.Errorf("%w: %d %s headers, want 1", ErrBadSignature, len(vs), key)
	}
}

// isAlnum reports whether s is 1 to 64 ASCII letters and digits.
func isAlnum(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}
