package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

func Example() {
	ctx := context.Background()
	c := client.New(client.Config{BaseURL: "http://127.0.0.1:7070"})

	t, created, err := c.Schedule(ctx, client.ScheduleRequest{
		App:     "billing",
		Key:     "order-42",
		Delay:   task.Duration(30 * time.Minute),
		Payload: json.RawMessage(`{"order":42}`),
		Target:  task.Target{HTTP: &task.HTTPTarget{URL: "https://billing.internal/expire"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(t.ID, created)

	// The order was paid in time.
	var e *client.Error
	if err := c.CancelByKey(ctx, "billing", "order-42"); errors.As(err, &e) && e.Task != nil {
		fmt.Println("too late, the task is", e.Task.State)
	}
}

func ExampleClient_Claim() {
	ctx := context.Background()
	c := client.New(client.Config{})
	for ctx.Err() == nil {
		tasks, err := c.Claim(ctx, "billing", client.ClaimRequest{
			Max:   10,
			Lease: task.Duration(30 * time.Second),
			Wait:  task.Duration(10 * time.Second),
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, t := range tasks {
			if err := handle(t); err != nil {
				_ = c.Nack(ctx, t.ID, client.NackRequest{Lease: t.Lease, Error: err.Error()})
				continue
			}
			_ = c.Ack(ctx, t.ID, t.Lease)
		}
	}
}

func handle(*task.Task) error { return nil }
