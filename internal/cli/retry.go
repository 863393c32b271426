package cli

import (
	"context"
)

const retryHelp = `
Schedules a dead or expired task again, due now, and prints it as JSON.

Example:
  toc retry 01JD8X5C2M0000ABCDEFGHJKMN
`

func runRetry(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "retry", retryHelp)
	conn := addConnFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if len(pos) == 0 {
		return usagef("retry: give a task ID")
	}
	ref, err := resolveRef("retry", pos, "", "")
	if err != nil {
		return err
	}
	c, err := conn.client(e, "retry")
	if err != nil {
		return err
	}

	t, err := c.Retry(ctx, ref.id)
	if err != nil {
		return err
	}
	return printJSON(e.stdout, t)
}
