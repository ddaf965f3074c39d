package finance

import (
	"context"
	"errors"
	"testing"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

// recorder is a notifier that notes what it was told and fails on demand.
type recorder struct {
	name string
	fail error
	log  *[]string
}

func (r recorder) Notify(_ context.Context, m withdrawal.Processed) error {
	*r.log = append(*r.log, r.name+":"+m.WithdrawalID)
	return r.fail
}

func TestBothTellsEveryNotifierInOrder(t *testing.T) {
	var log []string
	b := Both{recorder{name: "topic", log: &log}, recorder{name: "webhook", log: &log}}
	if err := b.Notify(context.Background(), message(t, "wd_1")); err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[0] != "topic:wd_1" || log[1] != "webhook:wd_1" {
		t.Fatalf("told %v, want the topic then the webhook", log)
	}
}

// A failure anywhere fails the message, so the job is retried: finance is
// told at least once on every channel, never silently skipped on one.
func TestBothFailsWhenOneRefuses(t *testing.T) {
	refused := errors.New("topic refused")
	var log []string
	b := Both{recorder{name: "topic", fail: refused, log: &log}, recorder{name: "webhook", log: &log}}
	if err := b.Notify(context.Background(), message(t, "wd_2")); !errors.Is(err, refused) {
		t.Fatalf("err = %v, want the topic's refusal", err)
	}
	log = nil
	b = Both{recorder{name: "topic", log: &log}, recorder{name: "webhook", fail: refused, log: &log}}
	if err := b.Notify(context.Background(), message(t, "wd_3")); !errors.Is(err, refused) {
		t.Fatalf("err = %v, want the webhook's refusal", err)
	}
	if len(log) != 2 {
		t.Fatalf("told %v, want both asked", log)
	}
}
