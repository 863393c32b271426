package client

import (
	"context"
	"net/http"
	"time"
)

// ClockState is the server's clock: GET /v1/admin/clock, and the answer
// of [Client.AdvanceClock].
type ClockState struct {
	// Now is the server's time: the test clock's, or the wall clock's.
	Now time.Time `json:"now"`
	// TestClock is true on a server started with `toc serve --test-clock`,
	// whose time moves only when [Client.AdvanceClock] moves it.
	TestClock bool `json:"test_clock"`
	// Fired counts the push attempts started and the pull tasks that fell
	// due during an advance (AdvanceClock only).
	Fired int `json:"fired"`
}

// Clock returns the server's clock. It takes an admin token when the
// server has tokens configured.
func (c *Client) Clock(ctx context.Context) (ClockState, error) {
	var s ClockState
	_, err := c.do(ctx, http.MethodGet, "/v1/admin/clock", nil, nil, &s)
	return s, err
}

// AdvanceClock moves the test clock of a server started with
// `toc serve --test-clock` forward by d, in due order: every task, retry
// and schedule occurrence due by the new time is handed to its sink as if
// the time had passed step by step, and the call returns once every push
// attempt due by then has ended and every pull task due by then is
// claimable. A server on the wall clock answers 409 (an *[Error] with
// Status 409); a negative d, 400.
func (c *Client) AdvanceClock(ctx context.Context, d time.Duration) (ClockState, error) {
	return c.moveClock(ctx, map[string]string{"advance": d.String()})
}

// AdvanceClockTo is [Client.AdvanceClock] to the time `to`, which must
// not be before the server's time.
func (c *Client) AdvanceClockTo(ctx context.Context, to time.Time) (ClockState, error) {
	return c.moveClock(ctx, map[string]string{"to": to.UTC().Format(time.RFC3339Nano)})
}

func (c *Client) moveClock(ctx context.Context, body map[string]string) (ClockState, error) {
	var s ClockState
	_, err := c.do(ctx, http.MethodPost, "/v1/admin/clock", nil, body, &s)
	return s, err
}
