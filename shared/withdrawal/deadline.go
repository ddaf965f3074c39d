package withdrawal

import (
	"context"
	"time"
)

type callDeadlineKey struct{}

// WithCallDeadline returns ctx carrying the deadline of the payout attempt
// its provider calls run in. A Provider makes no call that could not start
// before it (ErrTooLate) and cuts a call short at it, so that no request of
// the attempt is signed, or still running, once another consumer may take
// the withdrawal over: a request can then reach the provider no later than
// the deadline plus the provider's signature tolerance, which is what a
// lookup's "never received" is judged against (Withdrawal.SentUntil).
func WithCallDeadline(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, callDeadlineKey{}, t)
}

// CallDeadline returns the deadline WithCallDeadline put in ctx.
func CallDeadline(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(callDeadlineKey{}).(time.Time)
	return t, ok
}
