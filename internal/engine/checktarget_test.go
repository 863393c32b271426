package engine

import (
	"errors"
	"slices"
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

// TestCheckTargetOncePerRun: a call's run of tasks of one app with the
// same plain target has it checked once (Validate parses its URL, and
// CheckTarget vets it), and a change of app or target checks again; a
// target refused is refused for each task that has it. Each task was
// checked on its own before.
func TestCheckTargetOncePerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type call struct{ app, url string }
		var calls []call
		b := setup(t, func(c *Config) {
			c.CheckTarget = func(app string, tg task.Target) error {
				calls = append(calls, call{app, tg.HTTP.URL})
				if tg.HTTP.URL == "http://127.0.0.1:1/no" {
					return &task.FieldError{Field: "target.http.url", Message: "is not allowed"}
				}
				return nil
			}
		})
		now := time.Now().Add(time.Hour)
		hook := func(url string) task.Target { return task.Target{HTTP: &task.HTTPTarget{URL: url}} }
		var ps []CreateParams
		for range 5 {
			ps = append(ps, CreateParams{App: "a", DueAt: now, Target: hook("http://127.0.0.1:1/x")})
		}
		ps = append(ps,
			CreateParams{App: "b", DueAt: now, Target: hook("http://127.0.0.1:1/x")},
			CreateParams{App: "b", DueAt: now, Target: hook("http://127.0.0.1:1/y")},
			CreateParams{App: "b", DueAt: now, Target: hook("http://127.0.0.1:1/no")},
			CreateParams{App: "b", DueAt: now, Target: hook("http://127.0.0.1:1/no")},
			CreateParams{App: "b", DueAt: now, Target: hook("http://127.0.0.1:1/y")},
		)
		rs, err := b.eng.Create(t.Context(), ps)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			if refused := i == 7 || i == 8; refused != (r.Err != nil) {
				t.Errorf("create %d: %v, refused %v", i, r.Err, refused)
			}
		}
		want := []call{{"a", "http://127.0.0.1:1/x"}, {"b", "http://127.0.0.1:1/x"}, {"b", "http://127.0.0.1:1/y"},
			{"b", "http://127.0.0.1:1/no"}, {"b", "http://127.0.0.1:1/no"}, {"b", "http://127.0.0.1:1/y"}}
		if !slices.Equal(calls, want) {
			t.Errorf("CheckTarget calls %v, want %v", calls, want)
		}
	})
}

// TestNewTaskKeepsTarget: a new task keeps the target it was given (the
// caller hands it over: CreateParams), not a copy; one taken from the
// app's default target is a copy, as the policy's is shared.
func TestNewTaskKeepsTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		dflt := &task.Target{HTTP: &task.HTTPTarget{URL: "http://127.0.0.1:1/default"}}
		b.eng.SetPolicies(Policies{Apps: map[string]AppPolicy{"dflt": {Target: dflt}}})
		now := time.Now()
		given := task.Target{HTTP: &task.HTTPTarget{URL: "http://127.0.0.1:1/x"}}
		tk, err := b.eng.rules.newTask(CreateParams{App: "a", DueAt: now, Target: given}, now, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Target.HTTP != given.HTTP {
			t.Error("the task has a copy of the target it was given")
		}
		tk, err = b.eng.rules.newTask(CreateParams{App: "dflt", DueAt: now}, now, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Target.HTTP == nil || tk.Target.HTTP.URL != dflt.HTTP.URL {
			t.Fatalf("target %+v, want the app's default", tk.Target)
		}
		if tk.Target.HTTP == b.eng.Policy("dflt").Target.HTTP {
			t.Error("the task shares the app's default target")
		}
	})
}
