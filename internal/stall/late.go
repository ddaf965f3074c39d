package stall

import (
	"context"
	"fmt"
)

// Late is a call whose answer its caller never saw: one lost (LoseReply,
// Resend: already applied) or one given up on (GiveUp: held until
// DeliverLate). Its fields are the checker's to read once the call was
// made.
type Late struct {
	// ID names it for DeliverLate; ids count up from 1 in each scheduler.
	ID int
	// Actor and Label say who made the call and where.
	Actor, Label string
	// Delivered reports whether the call was sent (Err says whether it
	// then failed).
	Delivered bool
	// Reply is the answer nobody saw: a redis.Cmder (a []redis.Cmder for a
	// pipeline), a DynamoDB output, an *http.Response (its body already
	// read into Body), or what the call given to Do returned.
	Reply any
	// Body is an HTTP answer's body.
	Body []byte
	// Err is the call's error, if it had one.
	Err error

	deliver func(*Late)
}

func (s *Scheduler) newLate(a *Actor) *Late {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nLate++
	return &Late{ID: s.nLate, Actor: a.name, Label: a.label}
}

// Lates are the calls given up on and not delivered yet, oldest first.
func (s *Scheduler) Lates() []*Late {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Late(nil), s.lates...)
}

// DeliverLate makes the held call id reach its store or server now, on the
// checker's goroutine, and returns it with its answer recorded. Its caller
// gave up on it long ago and never sees the answer.
func (s *Scheduler) DeliverLate(id int) *Late {
	if s.t != nil {
		s.t.Helper()
	}
	s.mu.Lock()
	var l *Late
	for i, h := range s.lates {
		if h.ID == id {
			l = h
			s.lates = append(s.lates[:i:i], s.lates[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	if l == nil {
		s.fail("stall: no held call %d (delivered already, or never given up on)", id)
		return nil
	}
	l.deliver(l)
	return l
}

// Do runs call through a point labelled label: if ctx carries an actor, the
// caller parks there, and call then runs (or not, twice, or later) as the
// checker decides; every verdict applies. Without an actor it runs call at
// once. Wrap a client the hooks here do not cover (SQS, SNS) with it.
func Do[T any](ctx context.Context, label string, call func(ctx context.Context) (T, error)) (T, error) {
	return through(ctx, label, func(ctx context.Context, _ bool) (T, error) { return call(ctx) }, nil)
}

// through runs call at a point. seen tells call whether its caller will see
// its answer, so that a hook can make the unseen run into a copy; void
// reports an error that says the call did nothing (Redis's NOSCRIPT), which
// reaches the caller as it is.
func through[T any](ctx context.Context, label string, call func(ctx context.Context, seen bool) (T, error), void func(error) bool) (T, error) {
	a := actorOf(ctx)
	if a == nil {
		return call(ctx, true)
	}
	r := a.park(label, true)
	var zero T
	switch r.v {
	case proceed:
		return call(detach(ctx), true)
	case loseReply, resend:
		got, err := call(detach(ctx), false)
		r.late.Delivered, r.late.Reply, r.late.Err = true, got, err
		if void != nil && err != nil && void(err) {
			return zero, err
		}
		if r.v == resend {
			return call(detach(ctx), true)
		}
		return zero, context.DeadlineExceeded
	case giveUp:
		r.late.deliver = func(l *Late) {
			got, err := call(detach(ctx), false)
			l.Delivered, l.Reply, l.Err = true, got, err
		}
		return zero, context.DeadlineExceeded
	}
	return zero, r.v.err(label)
}

// detached is a context with the values of another but neither its
// cancellation nor its actor.
type detached struct{ context.Context }

func (d detached) Value(key any) any {
	if _, ok := key.(actorKey); ok {
		return nil
	}
	return d.Context.Value(key)
}

// detach is the context a parked call runs under once let go. Without the
// actor, a hook further down does not park it again: the outermost hook is
// the point. Without the cancellation, a real-time deadline that ran out
// while the actor was parked (for as long as the checker liked) does not
// decide the run: the model's time is the fake clock, and GiveUp is how a
// model makes a call time out.
func detach(ctx context.Context) context.Context {
	return detached{context.WithoutCancel(ctx)}
}

func (d detached) String() string { return fmt.Sprintf("stall.detach(%v)", d.Context) }
