package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// HeaderSignature carries the signature of a push from toc, when its app
// has signing secrets:
//
//	Toc-Signature: t=1767225600,v1=9b952ed176ed062ee6d3e3bf2d62af910dad6d0863ed4b52e9bd732e9f4e3ac2
//
// t is the signing time in Unix seconds and v1 the hex HMAC-SHA256, keyed
// with the secret, of t, a ".", and the request body. [Verify] checks it.
const HeaderSignature = "Toc-Signature"

// SignatureToleranceDefault is how far the signing time of a push may be
// from the receiver's clock when [Verify] is given a tolerance of 0.
const SignatureToleranceDefault = 5 * time.Minute

// Errors of [Verify].
var (
	// ErrNoSignature: the header is empty or has no v1 signature.
	ErrNoSignature = errors.New("toc: no signature")
	// ErrBadSignature: the header is malformed, or no v1 signature in it
	// matches the body under any of the secrets.
	ErrBadSignature = errors.New("toc: bad signature")
	// ErrSignatureExpired: the signature matches but its time is further
	// from now than the tolerance; it may be a replay.
	ErrSignatureExpired = errors.New("toc: signature expired")
)

// Sign returns the value of the [HeaderSignature] header for body, signed
// with secret at time t. toc calls it for every push of an app that has
// secrets; receivers need only [Verify], but Sign helps to test them.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

// mac is HMAC-SHA256(secret, ts + "." + body).
func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// maxSignatureHeader bounds the header Verify parses: a few signatures fit
// many times over.
const maxSignatureHeader = 4 << 10

// Verify checks the [HeaderSignature] header of a push against its raw body
// (the exact bytes received, before any decoding). It returns nil when a v1
// signature in the header matches under any of secrets and the signing time
// is within tolerance of now ([SignatureToleranceDefault] when tolerance is
// 0 or less). Giving two secrets, the new and the old, accepts pushes
// signed with either while a secret is rotated; toc signs with the first of
// an app's secrets. Empty secrets are ignored.
//
// The error is [ErrNoSignature], [ErrBadSignature] or [ErrSignatureExpired],
// possibly wrapped with detail; answer any of them with 401 and do not act
// on the body. Signatures are compared in constant time.
func Verify(secrets []string, header string, body []byte, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = SignatureToleranceDefault
	}
	header = strings.TrimSpace(header)
	if header == "" {
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
	matched, keyed := false, false
	for _, s := range secrets {
		if s == "" {
			continue
		}
		keyed = true
		want := mac(s, ts, body)
		for _, sig := range sigs {
			// Check every pair, so the time taken does not say which one matched.
			if hmac.Equal(sig, want) {
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
