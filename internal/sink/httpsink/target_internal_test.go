package httpsink

import (
	"hash/maphash"
	"net/http"
	"strconv"
	"testing"
)

// TestTargetCache: each URL gets the URL and host http.NewRequest makes of it,
// whichever URLs shared its slot before (many more URLs than slots), and
// the cached one from then on.
func TestTargetCache(t *testing.T) {
	t.Parallel()
	c := &targetCache{seed: maphash.MakeSeed()}
	for round := range 2 {
		for i := range 3 * targetSlots {
			raw := "http://user:pw@receiver-" + strconv.Itoa(i) + ".test:/hook?i=" + strconv.Itoa(i)
			tg, err := c.get(raw)
			if err != nil {
				t.Fatal(err)
			}
			want, err := http.NewRequest(http.MethodPost, raw, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tg.url != raw || tg.u.String() != want.URL.String() || tg.u.Host != want.Host {
				t.Fatalf("round %d, %s: target %q %+v, want the URL as http.NewRequest makes it: %+v (host %q)", round, raw, tg.url, tg.u, want.URL, want.Host)
			}
			if tg.auth != "Basic dXNlcjpwdw==" {
				t.Fatalf("%s: auth %q", raw, tg.auth)
			}
		}
	}
	if _, err := c.get("http://[::1"); err == nil {
		t.Error("a malformed URL gave a target")
	}
	tg, _ := c.get("http://receiver.test/")
	if again, _ := c.get("http://receiver.test/"); again != tg {
		t.Error("a URL's second push made its target again")
	}
}
