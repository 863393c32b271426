package config

import (
	"errors"
	"strings"
	"testing"
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
		{"whsec secret", "apps:\n  shop:\n    signing_secrets: [\"whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3\"]\n    signature: standard\n", ""},
		{"whsec secret not base64", "apps:\n  shop:\n    signing_secrets: [\"whsec_not base64 at all!!\"]\n", "apps.shop.signing_secrets[0]"},
		{"whsec key too short", "apps:\n  shop:\n    signing_secrets: [\"whsec_c2hvcnQ=\"]\n", "apps.shop.signing_secrets[0]"},
		{"unknown signature", "defaults:\n  signature: hmac\n", "defaults.signature"},
		{"target on the default", "amqp: amqp://h/\napps:\n  shop:\n    target: {amqp: {exchange: x}}\n", ""},
		{"target on an allowed name", "brokers: {o: amqp://o/}\napps:\n  shop:\n    allowed_brokers: [o]\n    target: {amqp: {url: o, exchange: x}}\n", ""},
		// A broker the operator writes into a default target is trusted (#23).
		{"target on a broker URL of the file's own", "apps:\n  shop:\n    target: {amqp: {url: \"amqp://guest:guest@127.0.0.1:5673/\", exchange: x}}\n", ""},
		{"target on a name of the file's own", "brokers: {o: \"nats://o:4222\"}\napps:\n  shop:\n    target: {nats: {url: o, subject: s}}\n", ""},
		{"defaults target on a URL of the file's own", "defaults:\n  target: {nats: {url: \"nats://127.0.0.1:4223\", subject: s}}\n", ""},
		{"target on an unknown name", "apps:\n  shop:\n    target: {nats: {url: o, subject: s}}\n", "apps.shop.target.nats.url"},
		{"target on a URL of the other kind", "apps:\n  shop:\n    target: {nats: {url: \"amqp://guest:guest@127.0.0.1:5673/\", subject: s}}\n", "apps.shop.target.nats.url"},
		// shop has its own (empty) allowed_brokers but inherits the
		// defaults' target on o: the operator wrote it, so shop may use o.
		{"defaults target inherited by an app with its own list", "brokers: {o: \"nats://o:4222\"}\ndefaults:\n  allowed_brokers: [o]\n  target: {nats: {url: o, subject: s}}\napps:\n  shop:\n    allowed_brokers: []\n", ""},
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

// TestTrustedTargets: a broker written into an app's default target in the
// file is the operator's own: the app may use it whatever the server's
// default brokers are (flags may set them), and tasks may name it; another
// app may not (#23).
func TestTrustedTargets(t *testing.T) {
	t.Parallel()
	f, err := Parse("toc.yaml", []byte("apps:\n  shop:\n    target: {amqp: {url: \"amqp://r:5672/\", exchange: x}}\n  bank: {}\n"))
	if err != nil {
		t.Fatalf("a default target on the operator's own broker refused: %v", err)
	}
	if err := f.ValidateTargets("amqp://other:5672/", ""); err != nil {
		t.Errorf("with --amqp elsewhere: %v, want the file's target kept", err)
	}
	if err := f.CheckBroker("shop", "amqp", "amqp://r:5672/", "amqp://other:5672/"); err != nil {
		t.Errorf("shop naming its default target's broker: %v", err)
	}
	if err := f.CheckBroker("bank", "amqp", "amqp://r:5672/", "amqp://other:5672/"); err == nil {
		t.Error("bank naming shop's broker: allowed, want refused")
	}
}

// TestMaxSchedules: max_schedules is a count, 0 (absent) for the default
// and -1 for no cap; a declared app without one takes the defaults'.
func TestMaxSchedules(t *testing.T) {
	f, err := Parse("toc.yaml", []byte("defaults: {max_schedules: 50}\napps:\n  shop: {max_schedules: -1}\n  bank: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for app, want := range map[string]int{"shop": -1, "bank": 50, "other": 50} {
		if got := f.Effective(app).MaxSchedules; got != want {
			t.Errorf("%s: max_schedules %d, want %d", app, got, want)
		}
	}
	_, err = Parse("toc.yaml", []byte("apps:\n  shop: {max_schedules: -2}\n"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Field != "apps.shop.max_schedules" {
		t.Errorf("max_schedules -2: %v, want an error naming apps.shop.max_schedules", err)
	}
}

// TestWeight: an app's weight is checked, names its field when wrong, and
// falls back to the defaults' when absent.
func TestWeight(t *testing.T) {
	t.Parallel()
	f, err := Parse("toc.yaml", []byte("defaults: {weight: 3}\napps:\n  shop: {weight: 2}\n  bank: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for app, want := range map[string]int{"shop": 2, "bank": 3, "other": 3} {
		if got := f.Effective(app).Weight; got != want {
			t.Errorf("Effective(%q).Weight = %d, want %d", app, got, want)
		}
	}
	for _, y := range []string{"apps:\n  shop: {weight: -1}\n", "apps:\n  shop: {weight: 101}\n"} {
		var ce *Error
		if _, err := Parse("toc.yaml", []byte(y)); !errors.As(err, &ce) || ce.Field != "apps.shop.weight" {
			t.Errorf("Parse(%q) = %v, want an error naming apps.shop.weight", y, err)
		}
	}
}
