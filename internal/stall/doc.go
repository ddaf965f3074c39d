// Package stall lets a model checker stall any actor of the system under
// test between any two of its I/O calls, for as long as it likes, while
// others act; and deliver a request after its sender gave up on it. It runs
// the real code: the stalls happen in hooks at its I/O boundaries.
//
// # Actors and points
//
// An actor is one goroutine of the system (a consumer handling a message, a
// poller round, a reconciler pass, an HTTP handler, a preheat) started by
// Scheduler.Go with the actor bound to its context. A point is a place where
// an actor is about to do I/O: RedisHook (every command and pipeline of a
// go-redis client), Dynamo (every DynamoDB call), Transport (every outbound
// HTTP request), Do (any other client a model wraps) and Point (a custom
// hook) park the calling goroutine there if its context carries an actor,
// and let it through at once if it does not, so the checker's own reads
// never block. A point's label says where it is: "redis EVALSHA claim
// {dq:withdrawals:0}:due", "dynamodb UpdateItem withdrawals", "http POST
// /payout".
//
// # Stepping
//
// Only one actor runs at a time; the others are parked. Go returns once the
// new actor parked at its first point or ended; Step lets a parked actor
// make its call and run to its next point or its end, and returns only then.
// So a sequence of checker calls replays exactly, and the checker chooses
// every interleaving at the granularity of single calls (a call parks after
// its arguments were built, before it is sent): two actors that
// read, then write, lose an update if and only if the checker steps both
// reads before either write. An actor parked for a hundred steps carries on
// with what it read before, as a process frozen by a GC pause or a
// suspended Lambda would. Instead of Step the checker may decide a call's
// fate: Fail (it never leaves), LoseReply (it is applied, the caller times
// out), Resend (it is applied twice, the caller sees the second answer) or
// GiveUp (the caller times out at once; the call is held and reaches its
// store or server when DeliverLate says, after others acted, or never).
// Abort ends a run as a dying process would: every call fails from then on
// and every actor runs to its end, so no goroutine outlives the run.
//
// # Time
//
// The scheduler does not own time. A model keeps a shared/clock.Fake and
// advances it between steps; a parked actor sees the new time when it goes
// on. For a stall to mean anything, the code under test must take every
// decision about time (leases, deadlines, retry delays) from its injected
// clock. Context deadlines are real time, which the model does not
// control: a parked call, once let go, runs detached from its context's
// cancellation, so a deadline that ran out while the actor was parked does
// not decide the run, and a model expresses a timeout with GiveUp or
// LoseReply instead. Keep real-time timeouts of the code under test far
// above a run's length.
//
// # Using it in a model
//
// Add the hooks once to the clients the code under test uses (they cost
// nothing for calls without an actor), then in each run:
//
//	s := stall.New(t)        // rapid: defer s.Abort()
//	c := s.Go(ctx, "consumer-1", func(ctx context.Context) error { … })
//	r := s.Go(ctx, "reconciler", func(ctx context.Context) error { … })
//	for each action rapid draws:
//	    pick a in s.Parked() (a.At() says where) and Step, Fail, LoseReply,
//	    Resend or GiveUp it; or DeliverLate one of s.Lates(); or advance the
//	    clock; or start another actor
//	    check the invariants (the checker's reads carry no actor)
//	s.FinishAll()            // or Abort, to model a crash
//
// Limits: an actor must make its calls one after another. Code that fans
// out (a batch handled concurrently, shards claimed in parallel) runs as
// one actor per branch, or with its concurrency set to one; a second
// goroutine of an actor that reaches a point while the actor is parked
// fails the test. I/O that no hook sees, or made under a context not
// derived from the actor's, is not a point: it happens within the step of
// the actor that makes it. A call parks before it takes a connection, except
// inside a WATCH transaction, whose connection a parked actor holds: size
// the pool above the number of actors. Hooks compose: a lostreply.Switch
// hook added after RedisHook acts on the calls the checker lets go.
package stall
