package seckill

import "time"

// OrderEvent is what happens to an order with a payment window after it
// was made: a payment report (Payment) or its expiry (Expire).
type OrderEvent interface {
	// OrderEventName names the event in the transition table.
	OrderEventName() string
}

// Expire is the order's payment window running out: the expiry job, due
// at its pay-by time, at Now.
type Expire struct {
	Now time.Time
}

// OrderEventName implements OrderEvent.
func (p Payment) OrderEventName() string {
	if p.Succeeded {
		return "payment succeeded"
	}
	return "payment failed"
}

// OrderEventName implements OrderEvent.
func (Expire) OrderEventName() string { return "expire" }

// OrderDecision is what an event does to an order: its end after, whether
// that end is to be written (at At), and a payment's outcome.
type OrderDecision struct {
	End     OrderEnd
	SetEnd  bool
	At      time.Time
	Outcome PaymentOutcome
	// Err is ErrNoOrder (the order has no payment window: nothing to pay
	// or expire) or ErrNotDue (its window is still open).
	Err error
}

// DecideOrder is the order's state machine after it was made: what event e
// does to order o as it stands. It is pure; both order ledgers write its
// end only if the end they read is still there (the first end wins for
// good), and record a payment's outcome once per event id.
func DecideOrder(o Order, e OrderEvent) OrderDecision {
	if o.PayBy.IsZero() {
		return OrderDecision{End: o.End, Err: ErrNoOrder}
	}
	switch e := e.(type) {
	case Payment:
		outcome, end := DecidePayment(o, e)
		return OrderDecision{End: end, SetEnd: end != o.End, At: e.At, Outcome: outcome}
	case Expire:
		switch {
		case o.End != EndNone:
			return OrderDecision{End: o.End}
		case e.Now.Before(o.PayBy):
			return OrderDecision{End: o.End, Err: ErrNotDue}
		}
		return OrderDecision{End: EndExpired, SetEnd: true, At: e.Now}
	}
	return OrderDecision{End: o.End, Err: ErrNoOrder}
}
