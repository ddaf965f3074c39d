package httpapi

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// View is a withdrawal as the HTTP API shows it.
type View struct {
	ID          string            `json:"id"`
	Status      withdrawal.Status `json:"status"`
	Amount      string            `json:"amount"`
	Currency    string            `json:"currency"`
	Destination string            `json:"destination"`
	DueAt       string            `json:"due_at"`
	CreatedAt   string            `json:"created_at"`
	UpdatedAt   string            `json:"updated_at"`
	Attempts    int               `json:"attempts"`
	LastError   *string           `json:"last_error"`
	PayoutID    *string           `json:"payout_id"`
}

// ViewOf is w as the API shows it: the status the user is shown, the
// public reason of a payout that did not go through, never the provider's
// own words.
func ViewOf(w withdrawal.Withdrawal) View {
	v := View{
		ID:          w.ID,
		Status:      w.Shown(),
		Amount:      money.Format(w.Amount, w.Currency),
		Currency:    w.Currency,
		Destination: w.Destination,
		DueAt:       clock.Format(w.DueAt),
		CreatedAt:   clock.Format(w.CreatedAt),
		UpdatedAt:   clock.Format(w.UpdatedAt),
		Attempts:    w.Attempts,
	}
	if reason := w.PublicError(); reason != "" {
		v.LastError = &reason
	}
	if w.PayoutID != "" {
		v.PayoutID = &w.PayoutID
	}
	return v
}

// CreatedBody is the body of the answer to a create: the view of the
// withdrawal as its create made it, byte for byte the same for a replay of
// its key. (A View always encodes: strings, numbers and their pointers.)
func CreatedBody(w withdrawal.Withdrawal) []byte {
	b, _ := json.Marshal(ViewOf(w))
	return b
}

var withdrawalFields = map[string]bool{
	"amount": true, "currency": true, "destination": true, "delay_seconds": true, "process_at": true,
}

// ParseWithdrawal decodes a create's body into a request by rules, naming
// every broken rule in one *validation.Error; the clock's judgement of its
// time is the service's (withdrawal.Rules.Due), after a replay is answered.
func ParseWithdrawal(rules withdrawal.Rules, body []byte) (withdrawal.Request, error) {
	verr := &validation.Error{}
	raw := verr.Object(body, withdrawalFields, false)
	if raw == nil {
		return withdrawal.Request{}, verr
	}
	var req withdrawal.Request
	req.Amount, req.Currency, _, _ = rules.Money().Parse(verr, raw, "amount", "currency", true)
	var ok bool
	if req.Destination, ok = verr.String(raw, "destination"); ok && !withdrawal.ValidDestination(req.Destination) {
		verr.Add("destination", withdrawal.DestinationRule)
	}
	req.When = parseWhen(rules, raw, verr)
	return req, judged(verr, rules.Validate(req), nil, named(verr))
}

var rescheduleFields = map[string]bool{"delay_seconds": true, "process_at": true}

// ParseReschedule decodes a reschedule's body: exactly one of
// delay_seconds (from now) or process_at, by the rules of a create.
func ParseReschedule(rules withdrawal.Rules, body []byte) (withdrawal.When, error) {
	verr := &validation.Error{}
	raw := verr.Object(body, rescheduleFields, false)
	if raw == nil {
		return withdrawal.When{}, verr
	}
	_, hasDelay := raw["delay_seconds"]
	_, hasAt := raw["process_at"]
	if !hasDelay && !hasAt {
		verr.Add("delay_seconds", "give delay_seconds or process_at")
		return withdrawal.When{}, verr
	}
	when := parseWhen(rules, raw, verr)
	check := &validation.Error{}
	rules.CheckWhen(when, check)
	return when, judged(verr, check.Err(), nil, named(verr))
}

// parseWhen reads delay_seconds or process_at into verr's judgement.
func parseWhen(rules withdrawal.Rules, raw map[string]json.RawMessage, verr *validation.Error) withdrawal.When {
	var when withdrawal.When
	if _, given := raw["delay_seconds"]; given {
		if secs, ok := verr.Int(raw, "delay_seconds", 0, 0, int64(rules.MaxDelay/time.Second), false); ok {
			when = withdrawal.After(time.Duration(secs) * time.Second)
		}
	}
	if at, _, ok := verr.Time(raw, "process_at"); ok {
		when.At = at
	}
	return when
}

// named is a skip for judged: the fields read refused already, so that
// the domain's refusal of the same field is not listed twice.
func named(read *validation.Error) func(string) bool {
	fields := make(map[string]bool, len(read.Errors))
	for _, f := range read.Errors {
		fields[f.Field] = true
	}
	return func(field string) bool { return fields[field] }
}

// CreateWithdrawal is a create as the API takes it: the body parsed by the
// service's rules and the Idempotency-Key checked, every problem of both
// in one *validation.Error, then the service's create.
func CreateWithdrawal(ctx context.Context, svc *withdrawal.Service, userID, key string, body []byte) (withdrawal.Created, error) {
	req, err := ParseWithdrawal(svc.Rules(), body)
	if !withdrawal.ValidKey(key) {
		return withdrawal.Created{}, withdrawal.JoinInvalid(
			validation.New("Idempotency-Key", "header is required: 1 to 255 printable ASCII characters"), err)
	}
	if err != nil {
		return withdrawal.Created{}, err
	}
	return svc.Create(ctx, userID, key, req)
}

// RescheduleWithdrawal is a reschedule as the API takes it: the body and
// the If-Match header (ifMatch, "" for none) parsed, every problem of both
// in one *validation.Error, then the service's reschedule.
func RescheduleWithdrawal(ctx context.Context, svc *withdrawal.Service, userID, id string, body []byte, ifMatch string) (withdrawal.Withdrawal, error) {
	when, err := ParseReschedule(svc.Rules(), body)
	rev, merr := ParseIfMatch(ifMatch, id)
	if err != nil || merr != nil {
		return withdrawal.Withdrawal{}, withdrawal.JoinInvalid(err, merr)
	}
	return svc.Reschedule(ctx, userID, id, when, rev)
}

// ParseIfMatch reads an If-Match header for withdrawal id: nil for none or
// "*" (any current record), else the revision the one strong entity tag
// names. A weak tag (W/"…") never matches (If-Match compares strongly), nor
// does a tag of another withdrawal or not of ours: both give a revision no
// record has, so the answer is 412. A header that is no entity tag, or a
// list of several, is a validation error (400).
func ParseIfMatch(h, id string) (*int64, error) {
	h = strings.TrimSpace(h)
	never := int64(-1)
	switch {
	case h == "" || h == "*":
		return nil, nil
	case strings.Contains(h, ","):
		return nil, validation.New("If-Match", "give one entity tag, or *")
	}
	tag, weak := strings.CutPrefix(h, "W/")
	if len(tag) < 2 || tag[0] != '"' || tag[len(tag)-1] != '"' {
		return nil, validation.New("If-Match", `must be an entity tag ("…") as the ETag header gave, or *`)
	}
	opaque := tag[1 : len(tag)-1]
	for i := 0; i < len(opaque); i++ {
		if c := opaque[i]; c == '"' || c < 0x21 || c == 0x7f {
			return nil, validation.New("If-Match", `must be an entity tag ("…") as the ETag header gave, or *`)
		}
	}
	if weak {
		return &never, nil
	}
	dot := strings.LastIndexByte(opaque, '.')
	if dot < 0 || opaque[:dot] != id {
		return &never, nil
	}
	rev, err := strconv.ParseInt(opaque[dot+1:], 10, 64)
	if err != nil || rev < 0 || strconv.FormatInt(rev, 10) != opaque[dot+1:] {
		return &never, nil
	}
	return &rev, nil
}
