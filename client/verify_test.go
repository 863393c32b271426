package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
)

const (
	idA = "01KDKR1KZZ4D5G3X7M9QW2E8NB"
	idB = "01KDKR1KZZ4D5G3X7M9QW2E8NC"
)

// pushHeader is the header of a push of task id, attempt number attempt,
// with signature sig.
func pushHeader(sig, id string, attempt int) http.Header {
	h := http.Header{}
	h.Set(client.HeaderSignature, sig)
	h.Set(client.HeaderTaskID, id)
	h.Set(client.HeaderAttempt, strconv.Itoa(attempt))
	return h
}

func TestSignKnownAnswer(t *testing.T) {
	t.Parallel()
	// printf '1767225600.01KDKR1KZZ4D5G3X7M9QW2E8NB.1.{"order":42}' | openssl dgst -sha256 -hmac whsec_example
	const want = "t=1767225600,v1=a59cb34cdee7fbb2e8d1ae07fe0c033e96a0aca0a4b0cf3c3f84594bedec8524"
	if got := client.Sign("whsec_example", time.Unix(1767225600, 0), idA, 1, []byte(`{"order":42}`)); got != want {
		t.Errorf("Sign = %q, want %q", got, want)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"order":42}`)
	now := time.Now()
	sign := func(secret string, at time.Time, b []byte) string { return client.Sign(secret, at, idA, 1, b) }
	tests := []struct {
		name      string
		secrets   []string
		header    string
		body      []byte
		tolerance time.Duration
		want      error // nil, or the sentinel errors.Is must find
	}{
		{name: "round trip", secrets: []string{"s1"}, header: sign("s1", now, body), body: body},
		{name: "empty body", secrets: []string{"s1"}, header: sign("s1", now, nil), body: nil},
		{name: "rotation: signed with the new secret", secrets: []string{"new", "old"}, header: sign("new", now, body), body: body},
		{name: "rotation: signed with the old secret", secrets: []string{"new", "old"}, header: sign("old", now, body), body: body},
		{name: "empty secrets skipped", secrets: []string{"", "s1"}, header: sign("s1", now, body), body: body},
		{name: "several v1, one matches", secrets: []string{"s1"},
			header: sign("other", now, body) + "," + strings.Split(sign("s1", now, body), ",")[1], body: body},
		{name: "unknown scheme ignored", secrets: []string{"s1"}, header: sign("s1", now, body) + ",v2=whatever", body: body},
		{name: "spaces around parts", secrets: []string{"s1"}, header: " " + strings.ReplaceAll(sign("s1", now, body), ",", " , ") + " ", body: body},
		{name: "within a custom tolerance", secrets: []string{"s1"}, header: sign("s1", now.Add(-50*time.Minute), body), body: body, tolerance: time.Hour},

		{name: "wrong secret", secrets: []string{"s2"}, header: sign("s1", now, body), body: body, want: client.ErrBadSignature},
		{name: "tampered body", secrets: []string{"s1"}, header: sign("s1", now, body), body: []byte(`{"order":43}`), want: client.ErrBadSignature},
		{name: "tampered time", secrets: []string{"s1"},
			header: strings.Replace(sign("s1", now, body), "t=", "t=1", 1), body: body, want: client.ErrBadSignature},
		{name: "signed for another task", secrets: []string{"s1"}, header: client.Sign("s1", now, idB, 1, body), body: body, want: client.ErrBadSignature},
		{name: "signed for another attempt", secrets: []string{"s1"}, header: client.Sign("s1", now, idA, 2, body), body: body, want: client.ErrBadSignature},
		{name: "too old", secrets: []string{"s1"}, header: sign("s1", now.Add(-6*time.Minute), body), body: body, want: client.ErrSignatureExpired},
		{name: "too far ahead", secrets: []string{"s1"}, header: sign("s1", now.Add(6*time.Minute), body), body: body, want: client.ErrSignatureExpired},
		{name: "outside a custom tolerance", secrets: []string{"s1"}, header: sign("s1", now.Add(-2*time.Second), body), body: body, tolerance: time.Second, want: client.ErrSignatureExpired},
		{name: "old and forged", secrets: []string{"s1"}, header: sign("s2", now.Add(-time.Hour), body), body: body, want: client.ErrBadSignature},

		{name: "no header", secrets: []string{"s1"}, header: "", body: body, want: client.ErrNoSignature},
		{name: "blank header", secrets: []string{"s1"}, header: "  ", body: body, want: client.ErrNoSignature},
		{name: "no v1", secrets: []string{"s1"}, header: "t=1767225600", body: body, want: client.ErrNoSignature},
		{name: "no t", secrets: []string{"s1"}, header: "v1=" + strings.Repeat("ab", 32), body: body, want: client.ErrBadSignature},
		{name: "two t", secrets: []string{"s1"}, header: sign("s1", now, body) + ",t=1", body: body, want: client.ErrBadSignature},
		{name: "t not a number", secrets: []string{"s1"}, header: "t=soon,v1=" + strings.Repeat("ab", 32), body: body, want: client.ErrBadSignature},
		{name: "negative t", secrets: []string{"s1"}, header: "t=-1,v1=" + strings.Repeat("ab", 32), body: body, want: client.ErrBadSignature},
		{name: "t out of range", secrets: []string{"s1"}, header: "t=9999999999999999999,v1=" + strings.Repeat("ab", 32), body: body, want: client.ErrBadSignature},
		{name: "v1 not hex", secrets: []string{"s1"}, header: "t=1,v1=" + strings.Repeat("zz", 32), body: body, want: client.ErrBadSignature},
		{name: "v1 short", secrets: []string{"s1"}, header: "t=1,v1=abcd", body: body, want: client.ErrBadSignature},
		{name: "part without =", secrets: []string{"s1"}, header: sign("s1", now, body) + ",junk", body: body, want: client.ErrBadSignature},
		{name: "empty part", secrets: []string{"s1"}, header: sign("s1", now, body) + ",", body: body, want: client.ErrBadSignature},
		{name: "huge header", secrets: []string{"s1"}, header: sign("s1", now, body) + strings.Repeat(",x=y", 2000), body: body, want: client.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := client.Verify(tt.secrets, pushHeader(tt.header, idA, 1), tt.body, tt.tolerance)
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

// TestVerifyDeliveryHeaders: the signature binds the task id and attempt
// headers, which must each be present once and well formed.
func TestVerifyDeliveryHeaders(t *testing.T) {
	t.Parallel()
	body := []byte(`{"order":42}`)
	sig := client.Sign("s1", time.Now(), idA, 3, body)
	tests := []struct {
		name   string
		change func(h http.Header)
		want   error // nil, or the sentinel errors.Is must find
	}{
		{name: "as signed", change: func(http.Header) {}},
		{name: "lower-case task id", change: func(h http.Header) { h.Set(client.HeaderTaskID, strings.ToLower(idA)) }, want: client.ErrBadSignature},
		{name: "task id of another task", change: func(h http.Header) { h.Set(client.HeaderTaskID, idB) }, want: client.ErrBadSignature},
		{name: "another attempt", change: func(h http.Header) { h.Set(client.HeaderAttempt, "1") }, want: client.ErrBadSignature},
		{name: "attempt with a leading zero", change: func(h http.Header) { h.Set(client.HeaderAttempt, "03") }, want: client.ErrBadSignature},
		{name: "no task id", change: func(h http.Header) { h.Del(client.HeaderTaskID) }, want: client.ErrBadSignature},
		{name: "empty task id", change: func(h http.Header) { h.Set(client.HeaderTaskID, "") }, want: client.ErrBadSignature},
		{name: "task id with a dot", change: func(h http.Header) { h.Set(client.HeaderTaskID, idA+".3") }, want: client.ErrBadSignature},
		{name: "task id with a space", change: func(h http.Header) { h.Set(client.HeaderTaskID, " "+idA) }, want: client.ErrBadSignature},
		{name: "task id too long", change: func(h http.Header) { h.Set(client.HeaderTaskID, strings.Repeat("A", 65)) }, want: client.ErrBadSignature},
		{name: "two task ids", change: func(h http.Header) { h.Add(client.HeaderTaskID, idB) }, want: client.ErrBadSignature},
		{name: "no attempt", change: func(h http.Header) { h.Del(client.HeaderAttempt) }, want: client.ErrBadSignature},
		{name: "empty attempt", change: func(h http.Header) { h.Set(client.HeaderAttempt, "") }, want: client.ErrBadSignature},
		{name: "negative attempt", change: func(h http.Header) { h.Set(client.HeaderAttempt, "-3") }, want: client.ErrBadSignature},
		{name: "attempt not a number", change: func(h http.Header) { h.Set(client.HeaderAttempt, "three") }, want: client.ErrBadSignature},
		{name: "attempt with a dot", change: func(h http.Header) { h.Set(client.HeaderAttempt, "3.") }, want: client.ErrBadSignature},
		{name: "attempt too long", change: func(h http.Header) { h.Set(client.HeaderAttempt, strings.Repeat("9", 20)) }, want: client.ErrBadSignature},
		{name: "two attempts", change: func(h http.Header) { h.Add(client.HeaderAttempt, "3") }, want: client.ErrBadSignature},
		{name: "no signature", change: func(h http.Header) { h.Del(client.HeaderSignature) }, want: client.ErrNoSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := pushHeader(sig, idA, 3)
			tt.change(h)
			err := client.Verify([]string{"s1"}, h, body, 0)
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("Verify(%v) = %v, want nil", h, err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("Verify(%v) = %v, want %v", h, err, tt.want)
			}
		})
	}
}

// TestVerifyReplayAcrossTasks: two tasks with the same body signed in the
// same second carry different signatures, and neither verifies as the other.
func TestVerifyReplayAcrossTasks(t *testing.T) {
	t.Parallel()
	body := []byte(`{"order":42}`)
	now := time.Now()
	sigA := client.Sign("s1", now, idA, 1, body)
	if sigB := client.Sign("s1", now, idB, 1, body); sigA == sigB {
		t.Fatalf("tasks %s and %s have the same signature %q", idA, idB, sigA)
	}
	if err := client.Verify([]string{"s1"}, pushHeader(sigA, idB, 1), body, 0); !errors.Is(err, client.ErrBadSignature) {
		t.Errorf("task A's signature under task B's id: %v, want %v", err, client.ErrBadSignature)
	}
	if err := client.Verify([]string{"s1"}, pushHeader(sigA, idA, 2), body, 0); !errors.Is(err, client.ErrBadSignature) {
		t.Errorf("attempt 1's signature as attempt 2: %v, want %v", err, client.ErrBadSignature)
	}
}

func TestVerifyNoSecrets(t *testing.T) {
	t.Parallel()
	h := pushHeader(client.Sign("s1", time.Now(), idA, 1, nil), idA, 1)
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

// ExampleSign shows the header toc sends with the first attempt of a push.
func ExampleSign() {
	fmt.Println(client.Sign("whsec_example", time.Unix(1767225600, 0), "01KDKR1KZZ4D5G3X7M9QW2E8NB", 1, []byte(`{"order":42}`)))
	// Output: t=1767225600,v1=a59cb34cdee7fbb2e8d1ae07fe0c033e96a0aca0a4b0cf3c3f84594bedec8524
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
		if err := client.Verify(secrets, r.Header, body, 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		// Act on body here, once per r.Header.Get(client.HeaderTaskID):
		// delivery is at least once. A 2xx answer marks the task delivered.
		w.WriteHeader(http.StatusNoContent)
	})

	push := func(taskID string, sig string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/expire", bytes.NewReader(body))
		r.Header.Set(client.HeaderTaskID, taskID)
		r.Header.Set(client.HeaderAttempt, "1")
		if sig != "" {
			r.Header.Set(client.HeaderSignature, sig)
		}
		w := httptest.NewRecorder()
		receiver.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprint(w.Code, " ", w.Body.String())))
	}
	const id, other = "01KDKR1KZZ4D5G3X7M9QW2E8NB", "01KDKR1KZZ4D5G3X7M9QW2E8NC"
	body := []byte(`{"order":42}`)
	push(id, client.Sign("whsec_old", time.Now(), id, 1, body), body)                  // signed before the rotation
	push(id, client.Sign("whsec_new", time.Now(), id, 1, body), []byte(`{"order":1}`)) // body tampered with
	push(other, client.Sign("whsec_new", time.Now(), id, 1, body), body)               // replayed as another task
	push(id, "", body)                                                                 // not from toc
	// Output:
	// 204
	// 401 toc: bad signature
	// 401 toc: bad signature
	// 401 toc: no signature
}
