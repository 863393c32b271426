package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const brokersYAML = `
amqp: amqp://toc:pw@rabbit.internal:5672/
nats: nats://nats.internal:4222
brokers:
  orders: amqp://toc:pw@orders.internal:5672/orders
  events: nats://ev1.internal:4222,nats://ev2.internal:4222
  billing: amqps://toc:pw@billing.internal:5671/
defaults:
  allowed_brokers: [events]
apps:
  shop:
    allowed_brokers: [orders, "amqp://toc:pw@extra.internal:5672/", "nats://n.internal:4222"]
  plain: {}
  none:
    allowed_brokers: []
`

func TestBroker(t *testing.T) {
	t.Parallel()
	f, err := Parse("toc.yaml", []byte(brokersYAML))
	if err != nil {
		t.Fatal(err)
	}
	const (
		defAMQP = "amqp://toc:pw@rabbit.internal:5672/"
		defNATS = "nats://nats.internal:4222"
	)
	tests := []struct {
		name, app, kind, ref, def string
		wantURL                   string
		wantAllowed               bool
		wantErr                   string // "" for none
	}{
		{"empty is the default", "shop", "amqp", "", defAMQP, defAMQP, true, ""},
		{"default URL spelled out", "plain", "amqp", defAMQP, defAMQP, defAMQP, true, ""},
		{"allowed name", "shop", "amqp", "orders", defAMQP, "amqp://toc:pw@orders.internal:5672/orders", true, ""},
		{"URL of an allowed name", "shop", "amqp", "amqp://toc:pw@orders.internal:5672/orders", defAMQP, "amqp://toc:pw@orders.internal:5672/orders", true, ""},
		{"allowed URL", "shop", "amqp", "amqp://toc:pw@extra.internal:5672/", defAMQP, "amqp://toc:pw@extra.internal:5672/", true, ""},
		{"allowed nats URL", "shop", "nats", "nats://n.internal:4222", defNATS, "nats://n.internal:4222", true, ""},
		{"name not allowed to the app", "shop", "amqp", "billing", defAMQP, "amqps://toc:pw@billing.internal:5671/", false, ""},
		{"name of the defaults", "plain", "nats", "events", defNATS, "nats://ev1.internal:4222,nats://ev2.internal:4222", true, ""},
		{"undeclared app gets the defaults", "other", "nats", "events", defNATS, "nats://ev1.internal:4222,nats://ev2.internal:4222", true, ""},
		{"app's own empty list", "none", "nats", "events", defNATS, "nats://ev1.internal:4222,nats://ev2.internal:4222", false, ""},
		{"any other URL", "shop", "amqp", "amqp://guest:guest@127.0.0.1:5673/", defAMQP, "amqp://guest:guest@127.0.0.1:5673/", false, ""},
		{"not exactly the default", "shop", "amqp", "amqp://toc:pw@rabbit.internal:5672", defAMQP, "amqp://toc:pw@rabbit.internal:5672", false, ""},
		{"unknown name", "shop", "amqp", "nope", defAMQP, "", false, "not the name of a broker"},
		{"name of the other kind", "shop", "nats", "orders", defNATS, "", false, "AMQP broker, not a NATS one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, allowed, err := f.Broker(tt.app, tt.kind, tt.ref, tt.def)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q %v %v, want an error with %q", url, allowed, err, tt.wantErr)
				}
				return
			}
			if err != nil || url != tt.wantURL || allowed != tt.wantAllowed {
				t.Errorf("got %q %v %v, want %q %v", url, allowed, err, tt.wantURL, tt.wantAllowed)
			}
			if cerr := f.CheckBroker(tt.app, tt.kind, tt.ref, tt.def); (cerr == nil) != tt.wantAllowed {
				t.Errorf("CheckBroker: %v, want allowed %v", cerr, tt.wantAllowed)
			}
		})
	}
}

func TestValidateBrokers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		field      string // "" for valid
	}{
		{"valid", brokersYAML, ""},
		{"bad name", "brokers: {\"a b\": amqp://h/}\n", "brokers.a b"},
		{"bad URL", "brokers: {x: http://h/}\n", "brokers.x"},
		{"mixed list", "brokers: {x: \"nats://a:4222,amqp://b/\"}\n", "brokers.x"},
		{"amqp list", "brokers: {x: \"amqp://a/,amqp://b/\"}\n", "brokers.x"},
		{"unknown name", "apps:\n  shop:\n    allowed_brokers: [nope]\n", "apps.shop.allowed_brokers[0]"},
		{"defaults unknown name", "defaults:\n  allowed_brokers: [nope]\n", "defaults.allowed_brokers[0]"},
		{"not a URL", "apps:\n  shop:\n    allowed_brokers: [\"ftp://h/\"]\n", "apps.shop.allowed_brokers[0]"},
		{"target on the default", "amqp: amqp://h/\napps:\n  shop:\n    target: {amqp: {exchange: x}}\n", ""},
		{"target on an allowed name", "brokers: {o: amqp://o/}\napps:\n  shop:\n    allowed_brokers: [o]\n    target: {amqp: {url: o, exchange: x}}\n", ""},
		{"target on a broker not allowed", "apps:\n  shop:\n    target: {amqp: {url: \"amqp://guest:guest@127.0.0.1:5673/\", exchange: x}}\n", "apps.shop.target.amqp.url"},
		{"target on a name not allowed", "brokers: {o: \"nats://o:4222\"}\napps:\n  shop:\n    target: {nats: {url: o, subject: s}}\n", "apps.shop.target.nats.url"},
		{"defaults target not allowed", "defaults:\n  target: {nats: {url: \"nats://127.0.0.1:4223\", subject: s}}\n", "defaults.target.nats.url"},
		// The defaults allow o; shop, which has its own list, inherits
		// their target but not o.
		{"defaults target not allowed to an app", "brokers: {o: \"nats://o:4222\"}\ndefaults:\n  allowed_brokers: [o]\n  target: {nats: {url: o, subject: s}}\napps:\n  shop:\n    allowed_brokers: []\n", "defaults.target.nats.url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("toc.yaml", []byte(tt.yaml))
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("got %v, want an error naming %s", err, tt.field)
			}
			if ce.Path != "toc.yaml" || strings.Contains(err.Error(), "guest:guest") {
				t.Errorf("error %q: want the file's path and no broker password", err)
			}
		})
	}
}

// TestValidateTargetsWithFlags: the server's default brokers may come from
// flags rather than the file.
func TestValidateTargetsWithFlags(t *testing.T) {
	t.Parallel()
	f, err := Parse("toc.yaml", []byte("apps:\n  shop:\n    target: {amqp: {url: \"amqp://r:5672/\", exchange: x}}\n"))
	if err == nil {
		t.Fatalf("parsed %+v, want the target refused without a default broker", f)
	}
	f, err = Parse("toc.yaml", []byte("amqp: amqp://r:5672/\napps:\n  shop:\n    target: {amqp: {url: \"amqp://r:5672/\", exchange: x}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ValidateTargets("amqp://other:5672/", ""); err == nil || !strings.Contains(err.Error(), "apps.shop.target.amqp.url") {
		t.Errorf("with --amqp elsewhere: %v, want apps.shop.target.amqp.url refused", err)
	}
}

// TestValidateServerLimits: the connection, body and origin settings.
func TestValidateServerLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		field      string // "" for valid
	}{
		{"valid", "max_connections: 1000\nmax_connections_per_client: 100\nidle_timeout: 10s\nmax_body_memory: 67108864\nallowed_origins: [\"https://ops.example.com\", \"http://localhost:5173\"]\n", ""},
		{"negative connections", "max_connections: -1\n", "max_connections"},
		{"negative per client", "max_connections_per_client: -1\n", "max_connections_per_client"},
		{"negative idle timeout", "idle_timeout: -1s\n", "idle_timeout"},
		{"body memory below two batches", "max_body_memory: 1048576\n", "max_body_memory"},
		{"origin with a path", "allowed_origins: [\"https://ops.example.com/ui\"]\n", "allowed_origins[0]"},
		{"origin without a scheme", "allowed_origins: [\"https://a.example\", \"ops.example.com\"]\n", "allowed_origins[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("toc.yaml", []byte(tt.yaml))
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				if f.MaxConnections != 1000 || f.MaxConnectionsPerClient != 100 || f.IdleTimeout.Std() != 10*time.Second ||
					f.MaxBodyMemory != 64<<20 || len(f.AllowedOrigins) != 2 {
					t.Errorf("parsed %+v", f)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("got %v, want an error naming %s", err, tt.field)
			}
		})
	}
}
