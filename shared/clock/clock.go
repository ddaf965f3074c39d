// Package clock is the injectable source of "now" for the queue, the domain and
// their tests. Nothing below the edges of the program calls time.Now directly.
package clock

import (
	"sync"
	"time"
)

// Clock tells the current time.
type Clock interface {
	Now() time.Time
}

// System is the wall clock.
type System struct{}

// Now returns time.Now.
func (System) Now() time.Time { return time.Now() }

// Fake is a clock that moves only when told to. It is safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a Fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake time forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// Set moves the fake time to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}

// Millis is t as Unix milliseconds, the unit every Redis score uses.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// FromMillis is the inverse of Millis, in UTC.
func FromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// APILayout is how the HTTP API writes times: RFC 3339, UTC, milliseconds.
const APILayout = "2006-01-02T15:04:05.000Z07:00"

// Format writes t in APILayout.
func Format(t time.Time) string { return t.UTC().Format(APILayout) }
