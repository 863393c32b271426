package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
)

func TestSignKnownAnswer(t *testing.T) {
	t.Parallel()
	// printf '1767225600.{"order":42}' | openssl dgst -sha256 -hmac whsec_example
	const want = "t=1767225600,v1=9b952ed176ed062ee6d3e3bf2d62af910dad6d0863ed4b52e9bd732e9f4e3ac2"
	if got := client.Sign("whsec_example", time.Unix(1767225600, 0), []byte(`{"order":42}`)); got != want {
		t.Errorf("Sign = %q, want %q", got, want)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"order":42}`)
	now := time.Now()
	tests := []struct {
		name      string
		secrets   []string
		header    string
		body      []byte
		tolerance time.Duration
		want      error // nil, or the sentinel errors.Is must find
	}{
		{name: "round trip", secrets: []string{"s1"}, header: client.Sign("s1", now, body), body: body},
		{name: "empty body", secrets: []string{"s1"}, header: client.Sign("s1", now, nil), body: nil},
		{name: "rotation: signed with the new secret", secrets: []string{"new", "old"}, header: client.Sign("new", now, body), body: body},
		{name: "rotation: signed with the old secret", secrets: []string{"new", "old"}, header: client.Sign("old", now, body), body: body},
		{name: "empty secrets skipped", secrets: []string{"", "s1"}, header: client.Sign("s1", now, body), body: body},
		{name: "several v1, one matches", secrets: []string{"s1"},
			header: client.Sign("other", now, body) + "," + strings.Split(client.Sign("s1", now, body), ",")[1], body: body},
		{name: "unknown scheme ignored", secrets: []string{"s1"}, header: client.Sign("s1", now, body) + ",v2=whatever", body: body},
		{name: "spaces around parts", secrets: []string{"s1"}, header: " " + strings.ReplaceAll(client.Sign("s1", now, body), ",", " , ") + " ", body: body},
		{name: "within a custom tolerance", secrets: []string{"s1"}, header: client.Sign("s1", now.Add(-50*time.Minute), body), body: body, tolerance: time.Hour},

		{name: "wrong secret", secrets: []string{"s2"}, header: client.Sign("s1", now, body), body: body, want: client.ErrBadSignature},
		{name: "tampered body", secrets: []string{"s1"}, header: client.Sign("s1", now, body), body: []byte(`{"order":43}`), want: client.ErrBadSignature},
		{name: "tampered time", secrets: []string{"s1"},
			header: strings.Replace(client.Sign("s1", now, body), "t=", "t=1", 1), body: body, want: client.ErrBadSignature},
		{name: "too old", secrets: []string{"s1"}, header: client.Sign("s1", now.Add(-6*time.Minute), body), body: body, want: client.ErrSignatureExpired},
		{name: "too far ahead", secrets: []string{"s1"}, header: client.Sign("s1", now.Add(6*time.Minute), body), body: body, want: client.ErrSignatureExpired},
		{name: "outside a custom tolerance", secrets: []string{"s1"}, header: client.Sign("s1", now.Add(-2*time.Second), body), body: body, tolerance: time.Second, want: client.ErrSignatureExpired},
		{name: "old and forged", secrets: []string{"s1"}, header: client.Sign("s2", now.Add(-time.Hour), body), body: body, want: client.ErrBadSignature},

		{name: "no header", secrets: []string{"s1"}, header: "", body: body, want: client.ErrNoSignature},
		{name: "blank header", secrets: []string{"s1"}, header: "  ", body: body, want: client.ErrNoSignature},
		{name: "no v1", secrets: []string{"s1"}, header: "t=1767225600", body: body, want: client.ErrNoSignature},
		{name: "no t", secrets: []string{"s1"}, header: "v1=" + strings.Repeat("ab", 32), body: body, want: client.ErrBadSignature},
		{name: "two t", secrets: []string{"s1"}, header: client.Sign("s1", now, body) + ",t=1", body: body, want: client.ErrBadSignature},
		{name: "t not a number", secrets: []string{"s1"}, header: "t=soon,v1=" + strings.Repeat("ab", 32), body: body, want: client.ErrBadSignature},
		{name: "negative t", secrets: []string{"s1"}, header: "t=-1,v1=" + strings.Repeat("ab", 32), body: body, want: client.ErrBadSignature},
		{name: "t out of range", secrets: []string{"s1"}, header: "t=9999999999999999999,v1=" + strings.Repeat("ab", 32), body: body, want: client.ErrBadSignature},
		{name: "v1 not hex", secrets: []string{"s1"}, header: "t=1,v1=" + strings.Repeat("zz", 32), body: body, want: client.ErrBadSignature},
		{name: "v1 short", secrets: []string{"s1"}, header: "t=1,v1=abcd", body: body, want: client.ErrBadSignature},
		{name: "part without =", secrets: []string{"s1"}, header: client.Sign("s1", now, body) + ",junk", body: body, want: client.ErrBadSignature},
		{name: "empty part", secrets: []string{"s1"}, header: client.Sign("s1", now, body) + ",", body: body, want: client.ErrBadSignature},
		{name: "huge header", secrets: []string{"s1"}, header: client.Sign("s1", now, body) + strings.Repeat(",x=y", 2000), body: body, want: client.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := client.Verify(tt.secrets, tt.header, tt.body, tt.tolerance)
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("Verify(%q) = %v, want nil", tt.header, err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("Verify(%q) = %v, want %v", tt.header, err, tt.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "toc: ") {
				t.Errorf("error %q lacks the toc: prefix", err)
			}
		})
	}
}

func TestVerifyNoSecrets(t *testing.T) {
	t.Parallel()
	h := client.Sign("s1", time.Now(), nil)
	for _, secrets := range [][]string{nil, {}, {""}} {
		err := client.Verify(secrets, h, nil, 0)
		if err == nil {
			t.Fatalf("Verify with secrets %q = nil, want an error", secrets)
		}
		if errors.Is(err, client.ErrBadSignature) || errors.Is(err, client.ErrNoSignature) {
			t.Errorf("Verify with secrets %q = %v, want a configuration error, not a verdict on the push", secrets, err)
		}
	}
}

// ExampleSign shows the header toc sends with a push.
func ExampleSign() {
	fmt.Println(client.Sign("whsec_example", time.Unix(1767225600, 0), []byte(`{"order":42}`)))
	// Output: t=1767225600,v1=9b952ed176ed062ee6d3e3bf2d62af910dad6d0863ed4b52e9bd732e9f4e3ac2
}

// ExampleVerify is a webhook receiver that acts only on pushes signed by
// toc. It keeps two secrets while the app's secret is being rotated.
func ExampleVerify() {
	secrets := []string{"whsec_new", "whsec_old"}
	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Verify the exact bytes received, before decoding them.
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		if err := client.Verify(secrets, r.Header.Get(client.HeaderSignature), body, 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		// Act on body here. A 2xx answer marks the task delivered.
		w.WriteHeader(http.StatusNoContent)
	})

	push := func(sig string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/expire", bytes.NewReader(body))
		r.Header.Set(client.HeaderSignature, sig)
		w := httptest.NewRecorder()
		receiver.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprint(w.Code, " ", w.Body.String())))
	}
	body := []byte(`{"order":42}`)
	push(client.Sign("whsec_old", time.Now(), body), body)                  // signed before the rotation
	push(client.Sign("whsec_new", time.Now(), body), []byte(`{"order":1}`)) // tampered with
	push("", body)                                                          // not from toc
	// Output:
	// 204
	// 401 toc: bad signature
	// 401 toc: no signature
}
