package client

import (
	"net/http"
	"testing"
)

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	if c.base != BaseURLDefault {
		t.Errorf("base = %q, want %q", c.base, BaseURLDefault)
	}
	if c.hc != http.DefaultClient {
		t.Errorf("HTTP client is not http.DefaultClient")
	}
	if c.token != "" {
		t.Errorf("token = %q, want none", c.token)
	}
}
