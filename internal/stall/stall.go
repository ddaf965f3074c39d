package stall

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// DefaultDeadlock is how long, in real time, the checker waits for an actor
// to reach its next point or end before it calls the run deadlocked.
const DefaultDeadlock = 2 * time.Minute

var (
	// ErrFailed is the error of an I/O call that the checker failed before
	// it left (Scheduler.Fail): nothing was applied.
	ErrFailed = errors.New("stall: the call failed before it was sent")
	// ErrAborted is the error of every I/O call after Scheduler.Abort: the
	// process died, nothing more reaches a store.
	ErrAborted = errors.New("stall: the process died")
	// ErrMisuse is the error of an I/O call reached while its actor was
	// not running (a second goroutine of one actor, or a goroutine that
	// outlived its actor); the checker's next call fails the test.
	ErrMisuse = errors.New("stall: an actor reached two points at once")
)

// PanicError is an actor's result when its function panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("stall: panic: %v\n%s", e.Value, e.Stack) }

// TB is what the scheduler needs of a test: testing.TB and rapid.TB both
// have it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Option configures New.
type Option func(*Scheduler)

// Deadlock sets the real-time guard of every wait (DefaultDeadlock). It is
// not a timing assertion: an actor that neither reaches a point nor ends
// within it is stuck, and the test fails saying where.
func Deadlock(d time.Duration) Option { return func(s *Scheduler) { s.deadlock = d } }

// Skip makes the points whose label skip reports true pass straight
// through, so that a model steps only the calls it cares about (its writes,
// say). Skipped calls run within the step of the actor making them.
func Skip(skip func(label string) bool) Option { return func(s *Scheduler) { s.skip = skip } }

// Scheduler runs actors one at a time and parks each at its I/O points
// until the checker lets it on. Its methods are for the checker's goroutine
// only; the actors reach it through their contexts.
type Scheduler struct {
	t        TB
	deadlock time.Duration
	skip     func(string) bool

	mu      sync.Mutex
	actors  []*Actor
	lates   []*Late
	nLate   int
	aborted bool
	misuse  []string
}

// New returns a scheduler whose failures (a deadlock, a misuse) fail t; a
// nil t makes them panics. When t has Cleanup (testing.TB does), Abort runs
// at the end of the test; otherwise the checker must call it.
func New(t TB, opts ...Option) *Scheduler {
	s := &Scheduler{t: t, deadlock: DefaultDeadlock}
	for _, o := range opts {
		o(s)
	}
	if c, ok := t.(interface{ Cleanup(func()) }); ok {
		c.Cleanup(s.Abort)
	}
	return s
}

type state int

const (
	running state = iota
	parked
	done
)

// verdict is what the checker decided for a parked call.
type verdict int

const (
	proceed verdict = iota
	fail
	loseReply
	resend
	giveUp
	abort
	misuse
)

var verdictNames = [...]string{"proceed", "fail", "lose the reply of", "resend", "give up on", "abort", "misuse"}

// resumption carries the checker's verdict, and the record of a reply the
// caller will not see, to a parked call.
type resumption struct {
	v    verdict
	late *Late
}

// Actor is one goroutine of the system under test (a consumer, a poller, a
// handler) that the scheduler parks at its points.
type Actor struct {
	s    *Scheduler
	name string

	// signal carries one token each time the actor parks or ends.
	signal chan struct{}

	// Guarded by s.mu.
	state  state
	label  string
	rich   bool // parked at a hooked call: every verdict applies
	resume chan resumption
	err    error
}

// Name is the name given to Go.
func (a *Actor) Name() string { return a.name }

// At is the label of the point where the actor is parked; "" once it ended.
func (a *Actor) At() string {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	return a.label
}

// Done reports whether the actor's function returned.
func (a *Actor) Done() bool {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	return a.state == done
}

// Err is what the actor's function returned (a *PanicError if it
// panicked); nil while it runs.
func (a *Actor) Err() error {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	return a.err
}

// String names the actor and where it is.
func (a *Actor) String() string {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	switch a.state {
	case parked:
		return a.name + " at " + a.label
	case done:
		return a.name + " (ended)"
	}
	return a.name + " (running)"
}

type actorKey struct{}

// actorOf is the actor ctx carries, or nil.
func actorOf(ctx context.Context) *Actor {
	a, _ := ctx.Value(actorKey{}).(*Actor)
	return a
}

// Go starts fn as an actor, with the actor bound to ctx, and returns once
// it is parked at its first point or has ended.
func (s *Scheduler) Go(ctx context.Context, name string, fn func(ctx context.Context) error) *Actor {
	if s.t != nil {
		s.t.Helper()
	}
	s.check()
	a := &Actor{s: s, name: name, signal: make(chan struct{}, 1)}
	s.mu.Lock()
	if s.aborted {
		s.mu.Unlock()
		s.fail("stall: Go(%q) after Abort", name)
		return a
	}
	s.actors = append(s.actors, a)
	s.mu.Unlock()
	ctx = context.WithValue(ctx, actorKey{}, a)
	go func() {
		var err error
		defer func() {
			if r := recover(); r != nil {
				err = &PanicError{Value: r, Stack: debug.Stack()}
			}
			s.mu.Lock()
			a.state, a.label, a.err = done, "", err
			s.mu.Unlock()
			a.signal <- struct{}{}
		}()
		err = fn(ctx)
	}()
	s.wait(a)
	return a
}

// park parks the calling goroutine at label until the checker resumes it.
// rich says whether the caller can act on every verdict (a hook) or only on
// proceed and fail (Point).
func (a *Actor) park(label string, rich bool) resumption {
	s := a.s
	s.mu.Lock()
	switch {
	case s.aborted:
		s.mu.Unlock()
		return resumption{v: abort}
	case s.skip != nil && s.skip(label):
		s.mu.Unlock()
		return resumption{v: proceed}
	case a.state != running:
		where := "it has ended"
		if a.state == parked {
			where = "it is parked at " + a.label
		}
		s.misuse = append(s.misuse, fmt.Sprintf("actor %s reached %q while %s: an actor must make its calls one after another, from one goroutine at a time (run each concurrent branch as an actor of its own)", a.name, label, where))
		s.mu.Unlock()
		return resumption{v: misuse}
	}
	ch := make(chan resumption, 1)
	a.state, a.label, a.rich, a.resume = parked, label, rich, ch
	s.mu.Unlock()
	a.signal <- struct{}{}
	return <-ch
}

// Point parks the calling goroutine at label if ctx carries an actor of a
// live scheduler, until the checker lets it on; without an actor it returns
// nil at once. It returns ErrFailed if the checker failed the call,
// ErrAborted after Abort. A custom hook calls it before its I/O; a hook
// that can also lose replies or be given up on uses Do.
func Point(ctx context.Context, label string) error {
	a := actorOf(ctx)
	if a == nil {
		return nil
	}
	r := a.park(label, false)
	return r.v.err(label)
}

// err is the error a call sees for a verdict that stops it before it is
// sent, nil for one that lets it go.
func (v verdict) err(label string) error {
	switch v {
	case fail:
		return fmt.Errorf("%w: %s", ErrFailed, label)
	case abort:
		return fmt.Errorf("%w: %s", ErrAborted, label)
	case misuse:
		return fmt.Errorf("%w: %s", ErrMisuse, label)
	}
	return nil
}

// Actors are every actor started, in the order Go started them.
func (s *Scheduler) Actors() []*Actor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Actor(nil), s.actors...)
}

// Parked are the actors parked at a point, in the order Go started them.
func (s *Scheduler) Parked() []*Actor {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Actor
	for _, a := range s.actors {
		if a.state == parked {
			out = append(out, a)
		}
	}
	return out
}

// Step lets a make the call it is parked at and run until its next point or
// its end, and returns only then.
func (s *Scheduler) Step(a *Actor) {
	if s.t != nil {
		s.t.Helper()
	}
	s.resume(a, proceed, nil)
}

// Fail makes a's call fail before it is sent (ErrFailed; nothing applied),
// then runs a until its next point or its end.
func (s *Scheduler) Fail(a *Actor) {
	if s.t != nil {
		s.t.Helper()
	}
	s.resume(a, fail, nil)
}

// LoseReply sends a's call and loses its answer: the call is applied and
// the caller gets a timeout (context.DeadlineExceeded). Then a runs until
// its next point or its end. The returned record holds the answer nobody
// saw. Redis's NOSCRIPT, an answer that says nothing ran, is handed to the
// caller as it is, since go-redis answers it by sending the script again
// (EVAL, a point of its own).
func (s *Scheduler) LoseReply(a *Actor) *Late {
	if s.t != nil {
		s.t.Helper()
	}
	return s.resume(a, loseReply, s.newLate(a))
}

// Resend sends a's call, loses the answer, and sends it again, as a client
// does when its connection died between request and answer: the call is
// applied twice and the caller gets the second answer. The returned record
// holds the first. (NOSCRIPT: see LoseReply.)
func (s *Scheduler) Resend(a *Actor) *Late {
	if s.t != nil {
		s.t.Helper()
	}
	return s.resume(a, resend, s.newLate(a))
}

// GiveUp makes a's caller time out at once (context.DeadlineExceeded) while
// its call stays on its way: it is held, and reaches its store or server
// only when DeliverLate is called with the returned record's ID, after
// whatever else the checker runs meanwhile; or never. Then a runs until its
// next point or its end.
func (s *Scheduler) GiveUp(a *Actor) *Late {
	if s.t != nil {
		s.t.Helper()
	}
	l := s.newLate(a)
	s.resume(a, giveUp, l)
	if l.deliver != nil {
		s.mu.Lock()
		s.lates = append(s.lates, l)
		s.mu.Unlock()
	}
	return l
}

// Finish steps a until it ends and returns its result.
func (s *Scheduler) Finish(a *Actor) error {
	if s.t != nil {
		s.t.Helper()
	}
	for {
		s.mu.Lock()
		st := a.state
		s.mu.Unlock()
		if st != parked {
			return a.Err()
		}
		s.Step(a)
	}
}

// FinishAll finishes every parked actor, in the order Go started them.
func (s *Scheduler) FinishAll() {
	if s.t != nil {
		s.t.Helper()
	}
	for _, a := range s.Parked() {
		_ = s.Finish(a) // an abort: how each actor ended is not asked
	}
}

// Abort ends the run as if the process died: every parked actor's call
// fails with ErrAborted, and so does every later call, so each actor runs to
// its end (one at a time) without touching a store through a hook; held
// calls are dropped. It returns once every actor ended. It is idempotent.
func (s *Scheduler) Abort() {
	if s.t != nil {
		s.t.Helper()
	}
	s.mu.Lock()
	if s.aborted {
		s.mu.Unlock()
		return
	}
	s.aborted = true
	s.lates = nil
	var stopped []*Actor
	var chans []chan resumption
	for _, a := range s.actors {
		if a.state == parked {
			stopped = append(stopped, a)
			chans = append(chans, a.resume)
			a.state, a.label, a.resume = running, "", nil
		}
	}
	s.mu.Unlock()
	for i, a := range stopped {
		chans[i] <- resumption{v: abort}
		s.wait(a)
	}
}

// resume hands v to the call a is parked at and waits until a parks again
// or ends; it returns late, filled in by the call.
func (s *Scheduler) resume(a *Actor, v verdict, late *Late) *Late {
	if s.t != nil {
		s.t.Helper()
	}
	s.check()
	s.mu.Lock()
	switch {
	case a.s != s:
		s.mu.Unlock()
		s.fail("stall: %s belongs to another scheduler", a.name)
		return late
	case a.state != parked:
		s.mu.Unlock()
		s.fail("stall: cannot %s %s: it is not parked (ended: %v)", verdictNames[v], a.name, a.state == done)
		return late
	case !a.rich && v != proceed && v != fail:
		label := a.label
		s.mu.Unlock()
		s.fail("stall: cannot %s %s at %q: a plain Point can only go on or fail", verdictNames[v], a.name, label)
		return late
	}
	ch := a.resume
	a.state, a.label, a.resume = running, "", nil
	s.mu.Unlock()
	ch <- resumption{v: v, late: late}
	s.wait(a)
	return late
}

// wait blocks until a parks or ends, guarded by the deadlock timeout.
func (s *Scheduler) wait(a *Actor) {
	if s.t != nil {
		s.t.Helper()
	}
	// Not a timing assertion: a guard so that a deadlock fails the test
	// instead of hanging it.
	guard := time.NewTimer(s.deadlock)
	defer guard.Stop()
	select {
	case <-a.signal:
	case <-guard.C:
		s.fail("stall: %s neither reached a point nor ended within %s: it waits for something that cannot happen while other actors are parked, or for I/O that no hook sees", a.name, s.deadlock)
	}
	s.check()
}

// check fails the test if an actor misused the scheduler.
func (s *Scheduler) check() {
	if s.t != nil {
		s.t.Helper()
	}
	s.mu.Lock()
	m := s.misuse
	s.misuse = nil
	s.mu.Unlock()
	if len(m) > 0 {
		s.fail("stall: %s", strings.Join(m, "; "))
	}
}

func (s *Scheduler) fail(format string, args ...any) {
	if s.t == nil {
		panic(fmt.Sprintf(format, args...))
	}
	s.t.Helper()
	s.t.Fatalf(format, args...)
}
