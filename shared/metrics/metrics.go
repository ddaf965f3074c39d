// Package metrics writes CloudWatch Embedded Metric Format (EMF) lines: JSON
// log lines that CloudWatch Logs turns into metrics, so the functions need no
// metrics API calls. The local stack prints the same lines among its logs.
package metrics

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"sync"

	"github.com/hourglass/hourglass/shared/clock"
)

// Namespace of every Hourglass metric.
const Namespace = "Hourglass"

// Units.
const (
	Count        = "Count"
	Milliseconds = "Milliseconds"
)

// Metric names, shared with the CDK dashboard and alarms.
const (
	DueBacklog        = "DueBacklog"
	DueNow            = "DueNow"
	OldestDueLagMs    = "OldestDueLagMs"
	Inflight          = "Inflight"
	Dead              = "Dead"
	Claimed           = "Claimed"
	Refused           = "Refused"
	Reaped            = "Reaped"
	DispatchLagMs     = "DispatchLagMs"
	PayoutsPaid       = "PayoutsPaid"
	PayoutsFailed     = "PayoutsFailed"
	PayoutRetries     = "PayoutRetries"
	PayoutsUnresolved = "PayoutsUnresolved"
	PayoutsRejected   = "PayoutsRejected"
	PayoutCallbacks   = "PayoutCallbacks"
	PayoutConflicts   = "PayoutConflicts"
	ConsumerLagMs     = "ConsumerLagMs"
	Admitted          = "Admitted"
	Refusals          = "Refusals"
	StockLeft         = "StockLeft"
	OrdersConfirmed   = "OrdersConfirmed"
	OrdersReleased    = "OrdersReleased"
	// OrdersPaid and OrdersExpired count flash-sale orders with a payment
	// window as they end.
	OrdersPaid    = "OrdersPaid"
	OrdersExpired = "OrdersExpired"
	// PaymentMismatches counts payment confirmations whose amount or
	// currency was not their order's (nothing paid; operators look).
	PaymentMismatches = "PaymentMismatches"
	// RefundsRequired counts payments that came for an order that had
	// expired or was paid already: the money must go back.
	RefundsRequired      = "RefundsRequired"
	CompensationRequeued = "CompensationRequeued"
	CompensationReleased = "CompensationReleased"
	// Reconciled counts the reconciler's repairs: jobs Redis should have
	// held and did not.
	Reconciled = "Reconciled"
	// Promoted counts withdrawals due beyond the Redis horizon that the
	// reconciler handed to Redis ahead of their time: not repairs.
	Promoted       = "Promoted"
	PollerFailures = "PollerFailures"
	// HousekeepingFailures counts failed runs of the poller's housekeeping
	// (queue metrics, reconciler, compensation, key purge), once without
	// dimensions (what alarms) and once by Task.
	HousekeepingFailures = "HousekeepingFailures"
	// OrderExpiryFailures counts expiry jobs of unpaid flash-sale orders
	// that failed (the consumer emits it); the order stays awaiting payment
	// and its stock held until one succeeds.
	OrderExpiryFailures = "OrderExpiryFailures"
	// PayoutDueToPaidMs is, for each payout the payout step makes, the
	// time from the withdrawal's due time to its payment.
	PayoutDueToPaidMs = "PayoutDueToPaidMs"
)

// maxValues is EMF's limit of values per metric in one line.
const maxValues = 100

// Value is one metric value, or several (up to 100) of one metric.
type Value struct {
	Name   string
	Unit   string
	Values []float64
}

// Of returns a Value of one number.
func Of(name, unit string, v float64) Value {
	return Value{Name: name, Unit: unit, Values: []float64{v}}
}

// Emitter writes EMF lines to w. A nil *Emitter emits nothing, so tests and
// callers that do not care may pass nil.
type Emitter struct {
	mu    sync.Mutex
	w     io.Writer
	clock clock.Clock
}

// New returns an Emitter writing to w.
func New(w io.Writer, clk clock.Clock) *Emitter {
	if clk == nil {
		clk = clock.System{}
	}
	return &Emitter{w: w, clock: clk}
}

type directive struct {
	Namespace  string       `json:"Namespace"`
	Dimensions [][]string   `json:"Dimensions"`
	Metrics    []metricDefn `json:"Metrics"`
}

type metricDefn struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

// Emit writes one line with values under the given dimensions (may be nil).
// Values with no numbers are left out; a line with none is not written.
func (e *Emitter) Emit(dims map[string]string, values ...Value) {
	if e == nil {
		return
	}
	line := make(map[string]any, len(dims)+len(values)+1)
	d := directive{Namespace: Namespace, Dimensions: [][]string{{}}}
	for k, v := range dims {
		d.Dimensions[0] = append(d.Dimensions[0], k)
		line[k] = v
	}
	for _, v := range values {
		if len(v.Values) == 0 {
			continue
		}
		vals := v.Values
		if len(vals) > maxValues {
			vals = vals[:maxValues]
		}
		d.Metrics = append(d.Metrics, metricDefn{Name: v.Name, Unit: v.Unit})
		if len(vals) == 1 {
			line[v.Name] = vals[0]
		} else {
			line[v.Name] = vals
		}
	}
	if len(d.Metrics) == 0 {
		return
	}
	line["_aws"] = map[string]any{
		"Timestamp":         e.clock.Now().UnixMilli(),
		"CloudWatchMetrics": []directive{d},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	b = append(b, '\n')
	e.mu.Lock()
	_, _ = e.w.Write(b)
	e.mu.Unlock()
}

// SetOutput sends later lines to w.
func (e *Emitter) SetOutput(w io.Writer) {
	e.mu.Lock()
	e.w = w
	e.mu.Unlock()
}

// Count emits one counter under dims.
func (e *Emitter) Count(name string, n int, dims map[string]string) {
	e.Emit(dims, Of(name, Count, float64(n)))
}

// Sample keeps up to 100 values of a metric, evenly thinned, for one line.
type Sample struct {
	mu     sync.Mutex
	values []float64
	seen   int
}

// Add records v.
func (s *Sample) Add(v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen++
	if len(s.values) < maxValues {
		s.values = append(s.values, v)
		return
	}
	// Reservoir sampling keeps every value equally likely to be kept.
	if i := rand.IntN(s.seen); i < maxValues {
		s.values[i] = v
	}
}

// Take returns the kept values and starts over.
func (s *Sample) Take() []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.values
	s.values, s.seen = nil, 0
	return out
}

// CallbackUnknown is the PayoutCallbacks metric's Result for a callback
// about a withdrawal that does not exist (never created, or purged).
const CallbackUnknown = "unknown"
