package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
)

// Access says which bearer tokens reach which apps. Tokens are held only as
// SHA-256 digests (the configuration never contains a token), and a
// presented token is compared against every digest in constant time.
//
// A nil *Access means no token is configured: every request is allowed.
// The server only runs so on a loopback address (local development) unless
// told --insecure.
type Access struct {
	grants []grant
}

type grant struct {
	digest [sha256.Size]byte
	admin  bool
	app    string
}

// NewAccess builds an Access from hex SHA-256 digests: admin digests reach
// every app, each app's digests reach that app. The same digest may be given
// to several apps.
func NewAccess(admin []string, apps map[string][]string) (*Access, error) {
	a := &Access{}
	add := func(hexDigest string, admin bool, app string) error {
		b, err := hex.DecodeString(hexDigest)
		if err != nil || len(b) != sha256.Size {
			return &apiError{msg: "token digest is not 64 hex digits: " + hexDigest}
		}
		var g grant
		copy(g.digest[:], b)
		g.admin, g.app = admin, app
		a.grants = append(a.grants, g)
		return nil
	}
	for _, d := range admin {
		if err := add(d, true, ""); err != nil {
			return nil, err
		}
	}
	for app, ds := range apps {
		for _, d := range ds {
			if err := add(d, false, app); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}

// principal is who a request acts as.
type principal struct {
	admin bool
	apps  map[string]bool
}

func (p *principal) can(app string) bool { return p.admin || p.apps[app] }

var adminPrincipal = &principal{admin: true}

// resolve returns the principal of token, or nil when no grant matches.
// Every digest is compared, match or not, so the time taken does not tell
// which one matched.
func (a *Access) resolve(token string) *principal {
	sum := sha256.Sum256([]byte(token))
	var p principal
	found := 0
	for _, g := range a.grants {
		if subtle.ConstantTimeCompare(sum[:], g.digest[:]) == 1 {
			found = 1
			if g.admin {
				p.admin = true
			} else {
				if p.apps == nil {
					p.apps = map[string]bool{}
				}
				p.apps[g.app] = true
			}
		}
	}
	if found == 0 {
		return nil
	}
	return &p
}

type principalKey struct{}

func who(ctx context.Context) *principal {
	if p, ok := ctx.Value(principalKey{}).(*principal); ok {
		return p
	}
	return adminPrincipal // no Access configured
}

var errUnauthenticated = &apiError{status: http.StatusUnauthorized, code: "unauthenticated",
	msg: "send a valid token as \"Authorization: Bearer <token>\""}

func errForbidden(app string) error {
	return &apiError{status: http.StatusForbidden, code: "forbidden", msg: "this token does not reach app " + app}
}

// authenticate resolves the bearer token of every request it wraps, or
// answers 401.
func (h *Handler) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := h.access.Load()
		if a == nil {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var p *principal
		if ok && token != "" {
			p = a.resolve(strings.TrimSpace(token))
		}
		if p == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toc"`)
			h.writeError(w, r, errUnauthenticated)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// SetAccess replaces the token grants (a config reload). nil allows every
// request.
func (h *Handler) SetAccess(a *Access) { h.access.Store(a) }
