package sink

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// FuzzIsJSON: IsJSON says what encoding/json's Valid says, and its fast
// path (jsontext's validator) never accepts what json.Valid refuses, so
// that a delivery's content type is what it was.
//
//	go test -run '^$' -fuzz FuzzIsJSON -fuzztime 60s ./internal/sink/
func FuzzIsJSON(f *testing.F) {
	for _, s := range []string{
		`{"order":42}`, `[1,2,3]`, `"x"`, `-0`, `1e999`, `true`, `null`, ` {} `, "\t[]\n",
		`{"a":1,"a":2}`, "\"\xff\xfe\"", `"\ud800"`, `"\udc00\ud800"`, `"\u0000"`, "\"\x7f\"", `"\/"`,
		``, ` `, `01`, `1.`, `.5`, `+1`, `[1,]`, `{"a":1,}`, `nul`, "\"a\tb\"", `"\x"`, "\ufeff{}", "{}\x00", `{} {}`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		"\x89PNG\r\n", "plain text",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		want := len(p) > 0 && json.Valid(p)
		if got := IsJSON(p); got != want {
			t.Errorf("IsJSON(%q) = %v, json.Valid says %v", p, got, want)
		}
		if jsontext.Value(p).IsValid(jsonLax...) && !json.Valid(p) {
			t.Errorf("jsontext accepts %q, which json.Valid refuses", p)
		}
	})
}
