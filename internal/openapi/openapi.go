// Package openapi holds toc's HTTP API described in OpenAPI 3
// (openapi.json, embedded), and serves it.
//
// The description is kept by hand next to the handlers; its tests hold it
// to them: every route httpapi registers is in it, and real answers of a
// running server to real requests (successes and errors) validate against
// it.
package openapi

import (
	"bytes"
	_ "embed"
	"net/http"
	"time"
)

//go:embed openapi.json
var spec []byte

// Spec returns the OpenAPI document (JSON). Do not change the slice.
func Spec() []byte { return spec }

// Handler serves the document as application/json. Mount it as
// "GET /openapi.json" with httpapi.Config.Public: it holds no data.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "openapi.json", time.Time{}, bytes.NewReader(spec))
	})
}
