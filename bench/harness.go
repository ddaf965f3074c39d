package main

import (
	"fmt"
	"testing"
)

// harness lets the benchmark start the test servers of internal/ (dynalite,
// the SQS endpoint), which take a testing.TB for their cleanups and
// failures. Only the methods those helpers call are implemented; a failure
// panics with its message, and run turns that panic back into an error.
type harness struct {
	testing.TB // nil: any other method panics
	cleanups   []func()
}

func (h *harness) Helper()                        {}
func (h *harness) Cleanup(f func())               { h.cleanups = append(h.cleanups, f) }
func (h *harness) Logf(string, ...any)            {}
func (h *harness) Errorf(format string, a ...any) { panic(harnessFailure(fmt.Sprintf(format, a...))) }
func (h *harness) Fatalf(format string, a ...any) { panic(harnessFailure(fmt.Sprintf(format, a...))) }
func (h *harness) Fatal(a ...any)                 { panic(harnessFailure(fmt.Sprint(a...))) }
func (h *harness) Skipf(format string, a ...any)  { panic(harnessFailure(fmt.Sprintf(format, a...))) }
func (h *harness) Name() string                   { return "bench" }
func (h *harness) TempDir() string                { panic(harnessFailure("harness: no TempDir")) }
func (h *harness) Setenv(string, string)          { panic(harnessFailure("harness: no Setenv")) }
func (h *harness) Failed() bool                   { return false }

type harnessFailure string

// run calls f with a harness and stops what f started when it returns; a
// failure of a helper is f's error.
func run(f func(h *harness) error) (err error) {
	h := &harness{}
	defer func() {
		for i := len(h.cleanups) - 1; i >= 0; i-- {
			h.cleanups[i]()
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			msg, ok := r.(harnessFailure)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%s", string(msg))
		}
	}()
	return f(h)
}
