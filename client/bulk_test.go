package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

func TestBulk(t *testing.T) {
	t.Parallel()
	after, before := t0, t0.Add(time.Hour)
	tests := []struct {
		name    string
		reply   reply
		call    func(context.Context, *client.Client) (client.BulkResult, error)
		pattern string
		app     string
		body    string
		want    client.BulkResult
	}{
		{
			name:  "RetryAll every filter",
			reply: reply{200, `{"count":700,"more":true}`},
			call: func(ctx context.Context, c *client.Client) (client.BulkResult, error) {
				return c.RetryAll(ctx, "billing", client.BulkFilter{State: task.Dead, KeyPrefix: "refund/", DueAfter: &after, DueBefore: &before, Limit: 700})
			},
			pattern: "POST /v1/apps/{app}/tasks:retry",
			app:     "billing",
			body:    `{"state":"dead","key_prefix":"refund/","due_after":"2026-03-01T12:00:00Z","due_before":"2026-03-01T13:00:00Z","limit":700}`,
			want:    client.BulkResult{Count: 700, More: true},
		},
		{
			name:  "RetryAll state only",
			reply: reply{200, `{"count":3}`},
			call: func(ctx context.Context, c *client.Client) (client.BulkResult, error) {
				return c.RetryAll(ctx, "billing", client.BulkFilter{State: task.Expired})
			},
			pattern: "POST /v1/apps/{app}/tasks:retry",
			app:     "billing",
			body:    `{"state":"expired"}`,
			want:    client.BulkResult{Count: 3},
		},
		{
			name:  "CancelAll",
			reply: reply{200, `{"count":0}`},
			call: func(ctx context.Context, c *client.Client) (client.BulkResult, error) {
				return c.CancelAll(ctx, "a.b", client.BulkFilter{State: task.Scheduled, KeyPrefix: "promo/"})
			},
			pattern: "POST /v1/apps/{app}/tasks:cancel",
			app:     "a.b",
			body:    `{"state":"scheduled","key_prefix":"promo/"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, f := setup(t, tt.reply)
			got, err := tt.call(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			s := f.last(t)
			checkRoute(t, s, tt.pattern, map[string]string{"app": tt.app})
			checkJSON(t, "body", tt.body, s.Body)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("result mismatch (-want +got):\n%s", d)
			}
		})
	}
}

func TestBulkErrors(t *testing.T) {
	t.Parallel()
	c, f := setup(t, reply{400, `{"error":{"code":"invalid_field","message":"must be \"dead\" or \"expired\" to retry, got \"scheduled\"","field":"state"}}`})
	ctx := context.Background()
	_, err := c.RetryAll(ctx, "a", client.BulkFilter{State: task.Scheduled})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 400 || ce.Field != "state" {
		t.Errorf("RetryAll: %v, want a 400 naming state", err)
	}
	if _, err := c.CancelAll(ctx, "a", client.BulkFilter{}); !errors.As(err, &ce) {
		t.Errorf("CancelAll: %v, want a *client.Error", err)
	}
	n := len(f.requests())
	for name, err := range map[string]error{
		"RetryAll no app":  second(c.RetryAll(ctx, "", client.BulkFilter{State: task.Dead})),
		"CancelAll no app": second(c.CancelAll(ctx, "", client.BulkFilter{State: task.Scheduled})),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if got := len(f.requests()); got != n {
		t.Errorf("sent %d requests without an app", got-n)
	}
}
