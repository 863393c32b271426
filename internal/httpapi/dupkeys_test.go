package httpapi

import "testing"

func TestCheckDuplicateKeys(t *testing.T) {
	cases := []struct {
		in    string
		field string // "" = accepted
	}{
		{`{"app":"a","delay":"1s"}`, ""},
		{`{"app":"a","app":"b"}`, "app"},
		{`{"target":{"http":{"url":"x","url":"y"}}}`, "url"},
		{`{"payload":{"a":1,"a":2},"app":"x"}`, ""},                    // the user's data
		{`{"payload":{"a":{"b":1,"b":2}},"app":"x","app":"y"}`, "app"}, // after the payload, checked again
		{`{"tasks":[{"app":"a"},{"app":"a","key":"k","key":"k"}]}`, "key"},
		{`{"tasks":[{"app":"a","payload":[{"x":1,"x":1}]},{"app":"b"}]}`, ""},
		{`{"a":[1,2,{"b":1}],"c":{"d":[{"e":1}]}}`, ""},
		{`{"retry":{"max_attempts":1,"max_attempts":2}}`, "max_attempts"},
		{`[{"a":1},{"a":1}]`, ""},
		{`{"a\u0070p":"x","app":"y"}`, "app"}, // the same key, escaped
		{`{"a\"b":1,"a\"b":2}`, `a"b`},
		{` { "x" : [ 1 , true , null , "s" ] , "y" : -1.5e3 , "x" : 0 } `, "x"},
		{`{"x":1,`, ""}, // not JSON: left to the decoder
	}
	for _, c := range cases {
		err := checkDuplicateKeys([]byte(c.in))
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v, want accepted", c.in, err)
		case c.field != "":
			ae, ok := err.(*apiError)
			if !ok || ae.field != c.field {
				t.Errorf("%s: %v, want a 400 on %q", c.in, err, c.field)
			}
		}
	}
}
