// Package client is the Go client of toc's HTTP API: schedule, look up,
// move, cancel, list and retry tasks, claim, ack and nack pull tasks, and
// manage recurring schedules.
// It uses the standard library and package [task] only.
//
// # Use
//
//	c := client.New(client.Config{BaseURL: "http://toc:7070", Token: token})
//
//	// Call https://billing/expire in 30 minutes, once per order.
//	t, created, err := c.Schedule(ctx, client.ScheduleRequest{
//		App:     "billing",
//		Key:     "order-42",
//		Delay:   task.Duration(30 * time.Minute),
//		Payload: json.RawMessage(`{"order":42}`),
//		Target:  task.Target{HTTP: &task.HTTPTarget{URL: "https://billing/expire"}},
//	})
//	if err != nil {
//		return err
//	}
//	if !created {
//		// order-42 was already scheduled; t is that task, unchanged.
//	}
//
//	// The order was paid: the timer is not needed any more.
//	err = c.CancelByKey(ctx, "billing", "order-42")
//	if client.IsConflict(err) {
//		// Too late: it is being delivered or was delivered.
//	}
//
// # Pull consumers
//
// A task with a pull target waits, once due, for a consumer to [Client.Claim]
// it. The claim leases it: [Client.Ack] it when done or [Client.Nack] it to
// have it retried, before the lease runs out, or it is given to another
// consumer. Delivery is at least once, so handle a task id twice gracefully.
//
//	tasks, err := c.Claim(ctx, "billing", client.ClaimRequest{
//		Max: 10, Lease: task.Duration(30 * time.Second), Wait: task.Duration(10 * time.Second),
//	})
//	for _, t := range tasks {
//		if err := handle(t); err != nil {
//			c.Nack(ctx, t.ID, client.NackRequest{Lease: t.Lease, Error: err.Error()})
//			continue
//		}
//		c.Ack(ctx, t.ID, t.Lease)
//	}
//
// A consumer that claims many tasks at a time can ack them together with
// [Client.AckMany]: one request and one durable write for up to 1000 acks,
// each with its own outcome.
//
// # Recurring schedules
//
// A schedule makes a task, an occurrence, at each time of its rule: a cron
// expression or a fixed interval, in a time zone. Each occurrence is an
// ordinary task of the app with the key "<schedule key>@<due time>" (see
// [task.OccurrenceKey]) and ScheduleID set.
//
//	s, created, err := c.CreateSchedule(ctx, client.CreateScheduleRequest{
//		App:      "shop",
//		Key:      "daily-report",
//		Cron:     "0 9 * * MON-FRI",
//		Timezone: "Europe/Berlin",
//		Target:   task.Target{HTTP: &task.HTTPTarget{URL: "https://shop/report"}},
//	})
//	times, err := c.NextScheduleTimes(ctx, s.ID, 5)
//	_, err = c.PauseSchedule(ctx, s.ID)
//
// [Client.PatchSchedule], [Client.ResumeSchedule], [Client.ListSchedules]
// and [Client.DeleteSchedule] (or [Client.DeleteScheduleByKey]) do the
// rest. Cancelling an occurrence by its key skips that one time only.
//
// # Errors
//
// Any answer outside 2xx is an [*Error] carrying the HTTP status, the
// server's code and message, the offending field on a 400, and the task as
// it is on a 409. [IsNotFound] and [IsConflict] test for the common cases.
// Network failures are returned as the [http.Client] reports them.
//
// # Limits
//
// The client does not retry: a create with a Key can be sent again safely,
// other calls may not be idempotent. Set timeouts with the context, or with
// [Config.HTTPClient], longer than any claim's Wait.
package client
