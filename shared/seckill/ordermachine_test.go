package seckill

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/internal/docscheck"
)

// The order's state machine after it was made (DecideOrder): every order
// state and event, no backend. wantOrderTransitions is the contract, by
// hand; docs/reliability.md shows the table rendered from DecideOrder
// (TestOrderTableInTheDocs), so it cannot drift.

var updateOrderDocs = flag.Bool("update-docs", false, "rewrite the order transition table in docs/reliability.md")

var orderPayBy = time.Date(2026, 12, 1, 12, 15, 0, 0, time.UTC)

func orderStates() []struct {
	name string
	o    Order
} {
	base := Order{ID: "or_1", Amount: "99.00", Currency: "CNY", PayBy: orderPayBy}
	with := func(end OrderEnd) Order {
		o := base
		o.End = end
		if end != EndNone {
			o.EndedAt = orderPayBy.Add(-time.Minute)
		}
		return o
	}
	return []struct {
		name string
		o    Order
	}{
		{"no payment window", Order{ID: "or_1"}},
		{"awaiting payment", with(EndNone)},
		{"paid", with(EndPaid)},
		{"expired", with(EndExpired)},
	}
}

func orderEvents() []struct {
	name string
	e    OrderEvent
} {
	pay := func(ok bool, amount string, at time.Time) Payment {
		return Payment{EventID: "ev_1", OrderID: "or_1", Succeeded: ok, Amount: decimal.RequireFromString(amount), Currency: "CNY", At: at}
	}
	before, after := orderPayBy.Add(-time.Second), orderPayBy
	// signed is a succeeded payment signed at signedAt, arriving at at,
	// judged with the 5-minute grace.
	signed := func(signedAt, at time.Time) Payment {
		p := pay(true, "99", at)
		p.SignedAt, p.Grace = signedAt, 5*time.Minute
		return p
	}
	return []struct {
		name string
		e    OrderEvent
	}{
		{"payment succeeded before pay-by", pay(true, "99", before)},
		{"payment succeeded at pay-by", pay(true, "99", after)},
		{"payment signed before pay-by, arriving within the grace", signed(before, after.Add(2*time.Minute))},
		{"payment signed at pay-by, arriving later", signed(after, after.Add(time.Minute))},
		{"payment signed before pay-by, arriving past the grace", signed(before, before.Add(5*time.Minute+time.Second))},
		{"payment signed in the future, arriving before pay-by", signed(after.Add(time.Minute), before)},
		{"payment failed", pay(false, "99", before)},
		{"payment of another amount", pay(true, "98.99", before)},
		{"expire before pay-by", Expire{Now: before}},
		{"expire at pay-by", Expire{Now: after}},
	}
}

func renderOrder(d OrderDecision) string {
	var parts []string
	switch {
	case errors.Is(d.Err, ErrNoOrder):
		return "refused: no order to pay or expire"
	case errors.Is(d.Err, ErrNotDue):
		return "refused: not due"
	case d.Err != nil:
		return "refused: " + d.Err.Error()
	}
	if d.Outcome != "" {
		parts = append(parts, "payment "+string(d.Outcome))
	}
	end := string(d.End)
	if end == "" {
		end = "awaiting payment"
	}
	if d.SetEnd {
		parts = append(parts, "ends "+end)
	} else {
		parts = append(parts, "stays "+end)
	}
	return strings.Join(parts, "; ")
}

var wantOrderTransitions = map[[2]string]string{
	{"no payment window", "payment succeeded before pay-by"}:                         "refused: no order to pay or expire",
	{"no payment window", "payment succeeded at pay-by"}:                             "refused: no order to pay or expire",
	{"no payment window", "payment signed before pay-by, arriving within the grace"}: "refused: no order to pay or expire",
	{"no payment window", "payment signed at pay-by, arriving later"}:                "refused: no order to pay or expire",
	{"no payment window", "payment signed before pay-by, arriving past the grace"}:   "refused: no order to pay or expire",
	{"no payment window", "payment signed in the future, arriving before pay-by"}:    "refused: no order to pay or expire",
	{"no payment window", "payment failed"}:                                          "refused: no order to pay or expire",
	{"no payment window", "payment of another amount"}:                               "refused: no order to pay or expire",
	{"no payment window", "expire before pay-by"}:                                    "refused: no order to pay or expire",
	{"no payment window", "expire at pay-by"}:                                        "refused: no order to pay or expire",
	{"awaiting payment", "payment succeeded before pay-by"}:                          "payment paid; ends paid",
	{"awaiting payment", "payment succeeded at pay-by"}:                              "payment refund; ends expired",
	// Judged by the signed time within the grace, else by the arrival.
	{"awaiting payment", "payment signed before pay-by, arriving within the grace"}: "payment paid; ends paid",
	{"awaiting payment", "payment signed at pay-by, arriving later"}:                "payment refund; ends expired",
	{"awaiting payment", "payment signed before pay-by, arriving past the grace"}:   "payment refund; ends expired",
	{"awaiting payment", "payment signed in the future, arriving before pay-by"}:    "payment paid; ends paid",
	{"awaiting payment", "payment failed"}:                                          "payment failed; stays awaiting payment",
	{"awaiting payment", "payment of another amount"}:                               "payment mismatch; stays awaiting payment",
	{"awaiting payment", "expire before pay-by"}:                                    "refused: not due",
	{"awaiting payment", "expire at pay-by"}:                                        "ends expired",
	{"paid", "payment succeeded before pay-by"}:                                     "payment refund; stays paid",
	{"paid", "payment succeeded at pay-by"}:                                         "payment refund; stays paid",
	{"paid", "payment signed before pay-by, arriving within the grace"}:             "payment refund; stays paid",
	{"paid", "payment signed at pay-by, arriving later"}:                            "payment refund; stays paid",
	{"paid", "payment signed before pay-by, arriving past the grace"}:               "payment refund; stays paid",
	{"paid", "payment signed in the future, arriving before pay-by"}:                "payment refund; stays paid",
	{"paid", "payment failed"}:                                                      "payment failed; stays paid",
	{"paid", "payment of another amount"}:                                           "payment mismatch; stays paid",
	{"paid", "expire before pay-by"}:                                                "stays paid",
	{"paid", "expire at pay-by"}:                                                    "stays paid",
	{"expired", "payment succeeded before pay-by"}:                                  "payment refund; stays expired",
	{"expired", "payment succeeded at pay-by"}:                                      "payment refund; stays expired",
	{"expired", "payment signed before pay-by, arriving within the grace"}:          "payment refund; stays expired",
	{"expired", "payment signed at pay-by, arriving later"}:                         "payment refund; stays expired",
	{"expired", "payment signed before pay-by, arriving past the grace"}:            "payment refund; stays expired",
	{"expired", "payment signed in the future, arriving before pay-by"}:             "payment refund; stays expired",
	{"expired", "payment failed"}:                                                   "payment failed; stays expired",
	{"expired", "payment of another amount"}:                                        "payment mismatch; stays expired",
	{"expired", "expire before pay-by"}:                                             "stays expired",
	{"expired", "expire at pay-by"}:                                                 "stays expired",
}

func TestEveryOrderTransition(t *testing.T) {
	n := 0
	for _, st := range orderStates() {
		for _, ev := range orderEvents() {
			n++
			d := DecideOrder(st.o, ev.e)
			key := [2]string{st.name, ev.name}
			want, ok := wantOrderTransitions[key]
			switch got := renderOrder(d); {
			case !ok:
				t.Errorf("%s / %s: no expectation (got %s)", key[0], key[1], got)
			case got != want:
				t.Errorf("%s / %s:\n got  %s\n want %s", key[0], key[1], got, want)
			}
			// Invariants: an end, once there, never changes; a refusal
			// writes nothing.
			if (st.o.End != EndNone && d.End != st.o.End) || (d.Err != nil && d.SetEnd) || (d.SetEnd && d.End == EndNone) {
				t.Errorf("%s / %s: %+v breaks the order's invariants", key[0], key[1], d)
			}
		}
	}
	if n != len(wantOrderTransitions) {
		t.Errorf("%d pairs decided, %d expected", n, len(wantOrderTransitions))
	}
}

func orderTable() string {
	var b strings.Builder
	b.WriteString("| order | event | outcome |\n|---|---|---|\n")
	for _, st := range orderStates() {
		for _, ev := range orderEvents() {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", st.name, ev.name, renderOrder(DecideOrder(st.o, ev.e)))
		}
	}
	return b.String()
}

func TestOrderTableInTheDocs(t *testing.T) {
	docscheck.Section(t, "../../docs/reliability.md", "order-transitions", orderTable(), *updateOrderDocs)
}
