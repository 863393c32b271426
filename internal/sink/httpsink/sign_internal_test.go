package httpsink

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// TestSignMatchesClient: the signature headers a push gets, made with
// keyed HMACs kept per secret, are byte for byte those of client.Sign and
// client.SignStandard, push after push (a reused HMAC starts afresh).
func TestSignMatchesClient(t *testing.T) {
	t.Parallel()
	now := time.Unix(1767225600, 0)
	for _, secrets := range [][]string{
		{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		{"plain-secret"},
		{"", "new-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		{"whsec_not base64!"},
	} {
		for _, scheme := range []string{"", SignatureBoth, SignatureStandard, SignatureToc} {
			s := New(Config{
				Secrets:   func(string) []string { return secrets },
				Signature: func(string) string { return scheme },
			})
			for i, payload := range []string{`{"order":42}`, "", `{"order":43,"x":"` + string(make([]byte, 200)) + `"}`} {
				tk := &task.Task{ID: task.ID{byte(i + 1)}, App: "billing", Attempts: i + 1, Payload: []byte(payload)}
				id := tk.ID.String()
				got := http.Header{}
				s.signAt(got, tk, id, now)
				want := http.Header{}
				if scheme != SignatureToc {
					want.Set(client.HeaderWebhookID, id)
					want.Set(client.HeaderWebhookTimestamp, "1767225600")
					want.Set(client.HeaderWebhookSignature, client.SignStandard(secrets, now, id, tk.Payload))
				}
				if scheme != SignatureStandard {
					first := secrets[0]
					if first == "" {
						first = secrets[1]
					}
					want.Set(HeaderSignature, client.Sign(first, now, id, tk.Attempts, tk.Payload))
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("secrets %q, scheme %q, push %d: headers (-want +got):\n%s", secrets, scheme, i, diff)
				}
			}
		}
	}
}
