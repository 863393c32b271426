package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toc test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestSecuredServer runs `toc serve` as in production: HTTPS, tokens (so not
// in local development mode), signed webhooks, and the callback guard that
// refuses private addresses unless an app allows them.
func TestSecuredServer(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	const secret = "a-signing-secret-of-some-length"
	cfg := filepath.Join(dir, "toc.yaml")
	yaml := "admin_tokens: [" + sum("admin-tok") + "]\n" +
		"apps:\n" +
		"  signed:\n    tokens: [" + sum("signed-tok") + "]\n    signing_secrets: [" + secret + "]\n    allowed_hosts: [127.0.0.1]\n" +
		"  strict:\n    tokens: [" + sum("strict-tok") + "]\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}

	rcv := testkit.NewReceiver(t)

	c := startChild(t, filepath.Join(dir, "data"), "--config", cfg, "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(c.url, "https://") {
		t.Fatalf("serving %s, want https", c.url)
	}
	httpc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	signed := client.New(client.Config{BaseURL: c.url, HTTPClient: httpc, Token: "signed-tok"})
	strict := client.New(client.Config{BaseURL: c.url, HTTPClient: httpc, Token: "strict-tok"})
	ctx := context.Background()

	// No token: 401. Another app's token: 403.
	if _, _, err := client.New(client.Config{BaseURL: c.url, HTTPClient: httpc}).Schedule(ctx, client.ScheduleRequest{App: "signed", Target: task.Target{Pull: &task.PullTarget{}}}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("no token: %v, want 401", err)
	}
	if _, _, err := strict.Schedule(ctx, client.ScheduleRequest{App: "signed", Target: task.Target{Pull: &task.PullTarget{}}}); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("other app's token: %v, want 403", err)
	}

	// The signed app may call 127.0.0.1 (allowed_hosts); its push is signed.
	tk, _, err := signed.Schedule(ctx, client.ScheduleRequest{App: "signed", Target: rcv.Target()})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the signed push", func() bool {
		got, err := signed.Get(ctx, tk.ID)
		return err == nil && got.State == task.Delivered
	})
	if got := rcv.Deliveries(); len(got) != 1 {
		t.Errorf("%d pushes, want 1", len(got))
	} else if err := client.Verify([]string{secret}, got[0].Header, got[0].Body, time.Minute); err != nil {
		t.Errorf("signature check: %v", err)
	}

	// The strict app may not: the attempt fails at connect time and says why.
	st, _, err := strict.Schedule(ctx, client.ScheduleRequest{App: "strict", Target: rcv.Target(),
		Retry: &task.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var dead *task.Task
	testkit.WaitFor(t, 10*time.Second, "the refused push", func() bool {
		dead, err = strict.Get(ctx, st.ID)
		return err == nil && dead.State == task.Dead
	})
	if !strings.Contains(dead.LastError, "allow_private_targets") {
		t.Errorf("last_error %q does not say how to allow the address", dead.LastError)
	}
	if pushes := rcv.Count(); pushes != 1 {
		t.Errorf("the refused push reached the receiver (%d pushes)", pushes)
	}
}
