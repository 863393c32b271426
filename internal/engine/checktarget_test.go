package engine

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/task"
)

// TestCheckTarget: Config.CheckTarget sees each create's app and target,
// the app's default target included, and its error refuses the create.
func TestCheckTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type call struct {
			app  string
			kind string
		}
		var calls []call
		b := setup(t, func(c *Config) {
			c.CheckTarget = func(app string, tg task.Target) error {
				calls = append(calls, call{app, tg.Kind()})
				if tg.AMQP != nil && tg.AMQP.URL != "" {
					return &task.FieldError{Field: "target.amqp.url", Message: "is not a broker this app may use"}
				}
				return nil
			}
		})
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{
			"dflt": {Target: &task.Target{AMQP: &task.AMQPTarget{URL: "amqp://127.0.0.1:1/"}}},
		}})
		now := time.Now().Add(time.Hour)
		rs, err := b.eng.Create(t.Context(), []CreateParams{
			{App: "shop", DueAt: now, Target: task.Target{AMQP: &task.AMQPTarget{URL: "amqp://127.0.0.1:1/"}}},
			{App: "shop", DueAt: now, Target: task.Target{AMQP: &task.AMQPTarget{Exchange: "x"}}},
			{App: "dflt", DueAt: now},
			{App: "shop", DueAt: now, Target: task.Target{AMQP: &task.AMQPTarget{URL: "bad url"}}}, // Validate refuses it first
		})
		if err != nil {
			t.Fatal(err)
		}
		var fe *task.FieldError
		for _, i := range []int{0, 2, 3} {
			if !errors.As(rs[i].Err, &fe) || fe.Field != "target.amqp.url" {
				t.Errorf("create %d: %v, want a FieldError on target.amqp.url", i, rs[i].Err)
			}
		}
		if rs[1].Err != nil || !rs[1].Created {
			t.Errorf("create 1: %+v, want created", rs[1])
		}
		want := []call{{"shop", "amqp"}, {"shop", "amqp"}, {"dflt", "amqp"}}
		if len(calls) != len(want) {
			t.Fatalf("CheckTarget calls %v, want %v", calls, want)
		}
		for i := range want {
			if calls[i] != want[i] {
				t.Errorf("CheckTarget calls %v, want %v", calls, want)
			}
		}
	})
}
