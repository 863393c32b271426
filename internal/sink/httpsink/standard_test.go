package httpsink_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/internal/testkit"
)

// TestStandardWebhooks: real pushes verify with the Standard Webhooks
// specification's own Go library, with a "whsec_" secret and a plain one,
// during a rotation (both secrets sign), and a tampered body does not; the
// signature setting picks the headers sent; client.Verify accepts both.
func TestStandardWebhooks(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(key)
	const plain = "plain-secret-of-2025"
	secrets := map[string][]string{"billing": {whsec, plain}, "std": {plain}, "own": {whsec}}
	schemes := map[string]string{"std": httpsink.SignatureStandard, "own": httpsink.SignatureToc}
	rc := testkit.NewReceiver(t)
	s := newSink(t, httpsink.Config{
		Secrets:   func(app string) []string { return secrets[app] },
		Signature: func(app string) string { return schemes[app] },
	})
	pushes := 0
	deliver := func(app, payload string) testkit.Delivery {
		t.Helper()
		tk := newTask(app, rc.URL, payload)
		tk.Attempts = 2
		if err := s.Deliver(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
		p := rc.Nth(t, pushes, within)
		pushes++
		if app != "own" && p.Header.Get("webhook-id") != tk.ID.String() {
			t.Errorf("%s: webhook-id %q, want the task id %s", app, p.Header.Get("webhook-id"), tk.ID)
		}
		return p
	}
	verifier := func(secret string) *standardwebhooks.Webhook {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		return wh
	}
	// A plain secret's bytes are the key: the library takes it as
	// "whsec_" + base64 of them (the README says so).
	plainAsWhsec := "whsec_" + base64.StdEncoding.EncodeToString([]byte(plain))

	p := deliver("billing", `{"order":1234}`)
	if ts, err := strconv.ParseInt(p.Header.Get("webhook-timestamp"), 10, 64); err != nil || time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
		t.Errorf("webhook-timestamp %q, want the attempt's Unix seconds", p.Header.Get("webhook-timestamp"))
	}
	if n := len(strings.Fields(p.Header.Get("webhook-signature"))); n != 2 {
		t.Errorf("webhook-signature %q: %d signatures, want one per secret (2)", p.Header.Get("webhook-signature"), n)
	}
	for name, wh := range map[string]*standardwebhooks.Webhook{"whsec secret (new)": verifier(whsec), "plain secret (old)": verifier(plainAsWhsec)} {
		if err := wh.Verify(p.Body, p.Header); err != nil {
			t.Errorf("%s: the library refuses the push: %v", name, err)
		}
		if err := wh.Verify([]byte(`{"order":1235}`), p.Header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
			t.Errorf("%s: tampered body: %v, want no matching signature", name, err)
		}
	}
	if err := verifier("whsec_"+base64.StdEncoding.EncodeToString([]byte("another-key-00000"))).Verify(p.Body, p.Header); err == nil {
		t.Error("verified with a secret toc does not have")
	}
	// Both schemes by default; client.Verify checks Toc-Signature, keyed
	// like the standard one (a whsec_ secret's decoded key).
	if p.Header.Get(httpsink.HeaderSignature) == "" {
		t.Error("default scheme: no Toc-Signature")
	}
	if err := client.Verify([]string{whsec}, p.Header, p.Body, 0); err != nil {
		t.Errorf("client.Verify of the default push: %v", err)
	}

	// standard: no Toc-Signature; client.Verify checks the standard one.
	p = deliver("std", "x")
	if p.Header.Get(httpsink.HeaderSignature) != "" {
		t.Errorf("standard scheme sent %s", httpsink.HeaderSignature)
	}
	if err := verifier(plainAsWhsec).Verify(p.Body, p.Header); err != nil {
		t.Errorf("standard scheme: the library refuses the push: %v", err)
	}
	if err := client.Verify([]string{"not-this-one-0000", plain}, p.Header, p.Body, 0); err != nil {
		t.Errorf("client.Verify of a standard push: %v", err)
	}
	if err := client.Verify([]string{plain}, p.Header, []byte("y"), 0); !errors.Is(err, client.ErrBadSignature) {
		t.Errorf("client.Verify of a tampered standard push: %v", err)
	}
	h := p.Header.Clone()
	h.Set("webhook-id", "01JD8X5C2M0000ABCDEFGHJKMN")
	if err := client.Verify([]string{plain}, h, p.Body, 0); !errors.Is(err, client.ErrBadSignature) {
		t.Errorf("client.Verify of a standard push with another id: %v", err)
	}

	// toc: Toc-Signature only.
	p = deliver("own", "x")
	if p.Header.Get("webhook-signature") != "" || p.Header.Get("webhook-id") != "" || p.Header.Get(httpsink.HeaderSignature) == "" {
		t.Errorf("toc scheme: headers %v, want Toc-Signature alone", p.Header)
	}
}

// TestVerifyStandardOld: client.Verify refuses a standard push signed too
// long ago.
func TestVerifyStandardOld(t *testing.T) {
	t.Parallel()
	then := time.Now().Add(-time.Hour)
	h := http.Header{}
	h.Set("webhook-id", "msg_1")
	h.Set("webhook-timestamp", strconv.FormatInt(then.Unix(), 10))
	h.Set("webhook-signature", client.SignStandard([]string{"plain-secret-of-2025"}, then, "msg_1", []byte("x")))
	if err := client.Verify([]string{"plain-secret-of-2025"}, h, []byte("x"), 0); !errors.Is(err, client.ErrSignatureExpired) {
		t.Errorf("an hour old: %v, want expired", err)
	}
}
