package httpapi

import (
	"fmt"
	"mime"
	"net/http"
)

// Web pages must not change toc's state. A page the developer has open in a
// browser can send a request to a local toc (local development mode: no
// tokens, so nothing else stops it), and the page's script chooses the
// body: a task that calls the developer's local services. Two rules keep
// pages out, on every route that changes state:
//
//   - Origin: a browser says where a request comes from (Sec-Fetch-Site,
//     Origin). A request from another origin is refused (403) unless the
//     operator lists that origin in Config.AllowedOrigins. net/http's
//     CrossOriginProtection does the check; GET, HEAD and OPTIONS pass.
//   - Content type, without tokens: a POST or PATCH must say
//     Content-Type: application/json (or application/x-ndjson, an import's).
//     A page can send those only after a CORS preflight, which toc never
//     grants; the types it may send without one (text/plain, forms) are
//     refused with 415. Browsers that predate Sec-Fetch-Site, or a header
//     check someone gets around, still cannot reach toc. With tokens the
//     rule is not needed: a page cannot attach the Authorization header
//     without a preflight either, and a request without it gets 401.
//
// DELETE carries no body and no browser sends it to another origin without
// a preflight, so it needs no content type; the origin rule applies to it.

// SetAllowedOrigins replaces the origins (like "https://ops.example.com",
// scheme://host[:port], no path) whose pages may change state through the
// API. A config reload calls it. It returns an error naming an origin that
// is not in that form, and then changes nothing.
func (h *Handler) SetAllowedOrigins(origins []string) error {
	p := http.NewCrossOriginProtection()
	for _, o := range origins {
		if err := p.AddTrustedOrigin(o); err != nil {
			return fmt.Errorf("allowed_origins: %w", err)
		}
	}
	h.origins.Store(p)
	return nil
}

// checkBrowserWrite applies the two rules above; the error is the answer.
func (h *Handler) checkBrowserWrite(r *http.Request) error {
	if err := h.origins.Load().Check(r); err != nil {
		from := r.Header.Get("Origin")
		if from == "" {
			from = "another site (Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site") + ")"
		}
		return &apiError{status: http.StatusForbidden, code: "cross_origin",
			msg: fmt.Sprintf("refused a %s from %s: a web page on another origin may not change toc's state; if the page is yours, list its origin in allowed_origins in the config file", r.Method, from)}
	}
	if h.access.Load() != nil || (r.Method != http.MethodPost && r.Method != http.MethodPatch && r.Method != http.MethodPut) {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if ct == "application/json" { // what clients send, without parsing
		return nil
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && (mt == "application/json" || mt == "application/x-ndjson") {
		return nil
	}
	got := "none"
	if ct != "" {
		got = fmt.Sprintf("%q", ct)
	}
	return &apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
		msg: fmt.Sprintf(`send the header "Content-Type: application/json" (curl: -H 'Content-Type: application/json', or --json instead of -d), got %s: without tokens toc takes only JSON, so that web pages cannot write to it`, got)}
}
