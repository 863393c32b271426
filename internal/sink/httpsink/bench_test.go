package httpsink_test

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/netguard"
	"github.com/toc-dev/toc/internal/sink/httpsink"
)

// BenchmarkDeliver measures one push: "sink" is the sink's own work
// (request, headers, signature, reading the answer) over a transport that
// answers 204 without I/O; "loopback" adds net/http's client and a
// receiver on 127.0.0.1, both in this process ("loopback-signed-guard" as
// toc serve's sink is: signed, under Guard). cpu-ns/op is the process's CPU
// time per push (every goroutine's: with loopback, the receiver's too), a
// steadier figure than ns/op on a busy machine.
//
//	go test -run '^$' -bench Deliver -benchmem ./internal/sink/httpsink/
func BenchmarkDeliver(b *testing.B) {
	payload := `{"order":"0123456789abcdef","amount":4200,"currency":"EUR","x":1}`
	canned := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		_, _ = io.Copy(io.Discard, r.Body)
		return &http.Response{StatusCode: http.StatusNoContent, Status: "204 No Content", Body: http.NoBody, Header: http.Header{}, Request: r}, nil
	})
	secrets := func(string) []string { return []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} }
	for _, bc := range []struct {
		name    string
		cfg     httpsink.Config
		url     string
		payload string // default payload
	}{
		{name: "sink", cfg: httpsink.Config{Client: &http.Client{Transport: canned}}, url: "http://receiver.test/hook"},
		{name: "sink-signed", cfg: httpsink.Config{Client: &http.Client{Transport: canned}, Secrets: secrets}, url: "http://receiver.test/hook"},
		// A 4 KB JSON payload: read in full to sign it and to tell it is JSON.
		{name: "sink-signed-4k", cfg: httpsink.Config{Client: &http.Client{Transport: canned}, Secrets: secrets}, url: "http://receiver.test/hook", payload: payload4k()},
		{name: "loopback"},
		// As toc serve sets it up: signed, every connection checked.
		{name: "loopback-signed-guard", cfg: httpsink.Config{Secrets: secrets, Guard: func(string) netguard.Policy { return netguard.Policy{AllowPrivate: true} }}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			url := bc.url
			if url == "" {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					w.WriteHeader(http.StatusNoContent)
				}))
				defer srv.Close()
				url = srv.URL + "/hook"
			}
			s := httpsink.New(bc.cfg)
			defer s.CloseIdleConnections()
			tk := newTask("billing", url, cmp.Or(bc.payload, payload))
			tk.Key = "order-42"
			tk.Attempts = 1
			tk.Target.HTTP.Headers = map[string]string{"Authorization": "Bearer " + strings.Repeat("x", 32)}
			tk.DueAt = time.Now().Truncate(time.Millisecond)
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				if err := s.Deliver(ctx, tk); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDeliverUniqueURLs measures the sink's own work for pushes that
// each go to a URL of their own (a token in the query, say), which the
// sink's cache of parsed target URLs cannot spare a parse: it must cost no
// more than a push did before that cache.
func BenchmarkDeliverUniqueURLs(b *testing.B) {
	canned := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		_, _ = io.Copy(io.Discard, r.Body)
		return &http.Response{StatusCode: http.StatusNoContent, Status: "204 No Content", Body: http.NoBody, Header: http.Header{}, Request: r}, nil
	})
	s := httpsink.New(httpsink.Config{Client: &http.Client{Transport: canned}})
	urls := make([]string, 100000)
	for i := range urls {
		urls[i] = "http://receiver.test/hook?token=" + strconv.Itoa(i)
	}
	tk := newTask("billing", "", `{"order":"0123456789abcdef","amount":4200,"currency":"EUR","x":1}`)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	cpu0 := cpuTime(b)
	for b.Loop() {
		tk.Target.HTTP.URL = urls[i%len(urls)]
		i++
		if err := s.Deliver(ctx, tk); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// payload4k is a JSON payload of about 4 KB: an order of 40 lines.
func payload4k() string {
	var b strings.Builder
	b.WriteString(`{"order":"0123456789abcdef","currency":"EUR","lines":[`)
	for i := 0; b.Len() < 4<<10; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"sku":"SKU-` + strconv.Itoa(100000+i) + `","name":"Caf\u00e9 cr\u00e8me, 250 g","qty":` + strconv.Itoa(i%7+1) + `,"price":12.50,"gift":false}`)
	}
	b.WriteString(`]}`)
	return b.String()
}
