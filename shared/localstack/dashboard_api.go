package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ops"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// The dashboard's actions: JSON endpoints under /dashboard/api/ behind the
// admin token, each calling the same code as the CLI (package ops):
//
//	GET  /dashboard/api/dead              dead jobs of every queue (or ?queue=)
//	GET  /dashboard/api/dead/job          one dead job and its record (?queue=&id=)
//	POST /dashboard/api/dead/requeue      {"queue","ids":[…]} or {"queue","all":true}
//	POST /dashboard/api/dead/purge        the same and "confirm":true
//	GET  /dashboard/api/payouts           unresolved payouts with their records
//	POST /dashboard/api/payouts/resolve   {"id","revision","payout_id"} or {…,"reason"}
//	GET  /dashboard/api/lookup            a withdrawal or order by id (?id=)
//
// Cross-site requests: the token travels in the X-Admin-Token header, never
// in a cookie, so a page of another origin cannot send it (a custom header
// needs a CORS preflight, which nothing here answers); state changes also
// take only POST with an application/json body, which no HTML form can send.
// GETs change nothing.

// The dashboard's own stable problem codes, beside httpapi's.
const (
	// CodeUnknownQueue (404): no queue has that name.
	CodeUnknownQueue = "unknown_queue"
	// CodeNotDead (404): a named job is not in its queue's dead set; with
	// several named, none was moved.
	CodeNotDead = "not_dead"
	// CodeConfirmationRequired (400): a purge without "confirm": true.
	CodeConfirmationRequired = "confirmation_required"
	// CodeNotResolvable (409): the withdrawal is not an operator's to
	// resolve now (the detail says why); nothing was written.
	CodeNotResolvable = "not_resolvable"
)

var dashboardTitles = map[string]string{
	CodeUnknownQueue:         "No such queue",
	CodeNotDead:              "Not a dead job",
	CodeConfirmationRequired: "The purge was not confirmed",
	CodeNotResolvable:        "The withdrawal is not an operator's to resolve",
}

// DashboardBy is who the dashboard's resolutions are recorded as made by.
const DashboardBy = "dashboard"

type apiRoute struct {
	method string
	serve  func(ctx context.Context, r *http.Request) (any, *apiProblem)
}

type apiProblem struct {
	status int
	code   string
	detail string
	errors []validation.Field
}

func problemOf(status int, code, detail string) *apiProblem {
	return &apiProblem{status: status, code: code, detail: detail}
}

func (d Dashboard) routes() map[string]apiRoute {
	return map[string]apiRoute{
		"metrics":         {http.MethodGet, func(context.Context, *http.Request) (any, *apiProblem) { return d.Tally.Report(), nil }},
		"dead":            {http.MethodGet, d.deadList},
		"dead/job":        {http.MethodGet, d.deadJob},
		"dead/requeue":    {http.MethodPost, func(ctx context.Context, r *http.Request) (any, *apiProblem) { return d.deadMove(ctx, r, ops.Requeue) }},
		"dead/purge":      {http.MethodPost, func(ctx context.Context, r *http.Request) (any, *apiProblem) { return d.deadMove(ctx, r, ops.Purge) }},
		"payouts":         {http.MethodGet, d.payouts},
		"payouts/resolve": {http.MethodPost, d.resolve},
		"lookup":          {http.MethodGet, d.lookup},
	}
}

// api serves /dashboard/api/<name>: the method, then the token, then the
// body are checked, in that order, before anything is read or written.
func (d Dashboard) api(w http.ResponseWriter, r *http.Request, name string) {
	rt, ok := d.routes()[name]
	if !ok {
		d.problem(w, http.StatusNotFound, httpapi.CodeNotFound, "no such dashboard endpoint")
		return
	}
	allow := rt.method
	if allow == http.MethodGet {
		allow = "GET, HEAD"
	}
	if r.Method != rt.method && (rt.method != http.MethodGet || r.Method != http.MethodHead) {
		w.Header().Set("Allow", allow)
		d.problem(w, http.StatusMethodNotAllowed, httpapi.CodeMethodNotAllowed, r.Method+" is not served here; "+allow+" is")
		return
	}
	if !d.authorized(w, r) {
		return
	}
	if name != "metrics" && d.App == nil {
		d.problem(w, http.StatusNotFound, httpapi.CodeNotFound, "the dashboard's actions are not served here")
		return
	}
	body, p := rt.serve(r.Context(), r)
	if p != nil {
		d.send(w, p)
		return
	}
	out, err := json.Marshal(body)
	if err != nil {
		d.problem(w, http.StatusInternalServerError, httpapi.CodeInternal, "an internal error occurred")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// authorized checks the admin token, answering 401 or 403 when it fails.
func (d Dashboard) authorized(w http.ResponseWriter, r *http.Request) bool {
	tok := r.Header.Get("X-Admin-Token")
	switch {
	case tok == "":
		d.problem(w, http.StatusUnauthorized, httpapi.CodeUnauthenticated, "the dashboard's data needs the X-Admin-Token header")
		return false
	case d.Token == "" || !httpapi.SameSecret(tok, d.Token):
		d.problem(w, http.StatusForbidden, httpapi.CodeForbidden, "the admin token is not valid")
		return false
	}
	return true
}

// decode reads r's body, application/json of one object of known fields,
// into v.
func decode(r *http.Request, v any) *apiProblem {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return problemOf(http.StatusUnsupportedMediaType, httpapi.CodeUnsupportedMediaType, "the body must be application/json")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, httpapi.MaxBody+1))
	if err != nil {
		return problemOf(http.StatusBadRequest, httpapi.CodeValidationFailed, "cannot read the body")
	}
	if len(body) > httpapi.MaxBody {
		return problemOf(http.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge, "the body is larger than 16 KiB")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return problemOf(http.StatusBadRequest, httpapi.CodeValidationFailed, "the body is not the JSON object expected: "+err.Error())
	}
	if dec.More() {
		return problemOf(http.StatusBadRequest, httpapi.CodeValidationFailed, "the body holds more than one JSON value")
	}
	return nil
}

// failed maps an error of ops or of the domain to a problem.
func (d Dashboard) failed(err error) *apiProblem {
	var verr *validation.Error
	switch {
	case errors.Is(err, ops.ErrNoQueue):
		return problemOf(http.StatusNotFound, CodeUnknownQueue, err.Error())
	case errors.Is(err, withdrawal.ErrNotFound), errors.Is(err, ops.ErrNotFound):
		return problemOf(http.StatusNotFound, httpapi.CodeNotFound, "nothing has this id")
	case errors.Is(err, withdrawal.ErrPreconditionFailed):
		return problemOf(http.StatusPreconditionFailed, httpapi.CodePreconditionFailed,
			"the withdrawal moved since the revision you judged; nothing written: look at it again and judge it again")
	case errors.Is(err, withdrawal.ErrNotResolvable):
		return problemOf(http.StatusConflict, CodeNotResolvable, strings.TrimPrefix(err.Error(), "withdrawal: ")+"; nothing written")
	case errors.As(err, &verr):
		p := problemOf(http.StatusBadRequest, httpapi.CodeValidationFailed, "the request is not valid")
		p.errors = verr.Errors
		return p
	}
	if d.App != nil {
		d.App.Log.Error("dashboard action failed", "error", err.Error())
	}
	return problemOf(http.StatusInternalServerError, httpapi.CodeInternal, "an internal error occurred")
}

// ---- dead jobs ----

type deadJobJSON struct {
	Queue  string `json:"queue"`
	Shard  int    `json:"shard"`
	ID     string `json:"id"`
	DiedAt string `json:"died_at"`
}

const maxDeadListed = 1000

func (d Dashboard) queues(ctx context.Context, name string) ([]*delayq.Queue, *apiProblem) {
	qs, err := d.App.Queues(ctx)
	if err != nil {
		return nil, d.failed(err)
	}
	if name == "" {
		return qs, nil
	}
	q, err := ops.FindQueue(qs, name)
	if err != nil {
		return nil, d.failed(err)
	}
	return []*delayq.Queue{q}, nil
}

func (d Dashboard) deadList(ctx context.Context, r *http.Request) (any, *apiProblem) {
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxDeadListed {
			return nil, problemOf(http.StatusBadRequest, httpapi.CodeValidationFailed, "limit must be within 1..1000")
		}
		limit = n
	}
	qs, p := d.queues(ctx, r.URL.Query().Get("queue"))
	if p != nil {
		return nil, p
	}
	jobs, err := ops.ListDead(ctx, qs, limit)
	if err != nil {
		return nil, d.failed(err)
	}
	counts := make(map[string]int64, len(qs))
	for _, q := range qs {
		if counts[q.Name()], err = q.DeadCount(ctx); err != nil {
			return nil, d.failed(err)
		}
	}
	out := make([]deadJobJSON, len(jobs))
	for i, j := range jobs {
		out[i] = deadJobJSON{Queue: j.Queue, Shard: j.Shard, ID: j.ID, DiedAt: clock.Format(j.DiedAt)}
	}
	return map[string]any{"jobs": out, "counts": counts}, nil
}

// deadPlaces returns where ids are dead in q (a job id does not tell its
// shard: every shard is asked).
func deadPlaces(ctx context.Context, q *delayq.Queue, ids []string) (map[string]delayq.Place, error) {
	refs := make([]delayq.Ref, 0, len(ids)*q.Shards())
	for _, id := range ids {
		for n := range q.Shards() {
			refs = append(refs, delayq.Ref{Shard: n, ID: id})
		}
	}
	places, err := q.Locate(ctx, refs...)
	if err != nil {
		return nil, err
	}
	dead := map[string]delayq.Place{}
	for _, p := range places {
		if p.State == delayq.StateDead {
			dead[p.ID] = p
		}
	}
	return dead, nil
}

func (d Dashboard) deadJob(ctx context.Context, r *http.Request) (any, *apiProblem) {
	name, id := r.URL.Query().Get("queue"), r.URL.Query().Get("id")
	if name == "" || id == "" || len(id) > 512 {
		return nil, problemOf(http.StatusBadRequest, httpapi.CodeValidationFailed, "give ?queue= and ?id= (at most 512 characters)")
	}
	qs, p := d.queues(ctx, name)
	if p != nil {
		return nil, p
	}
	dead, err := deadPlaces(ctx, qs[0], []string{id})
	if err != nil {
		return nil, d.failed(err)
	}
	place, ok := dead[id]
	if !ok {
		return nil, problemOf(http.StatusNotFound, CodeNotDead, id+" is not a dead job of "+name)
	}
	out := map[string]any{"job": deadJobJSON{Queue: place.Queue, Shard: place.Shard, ID: place.ID, DiedAt: clock.Format(place.At)}}
	// The record the job is about: a withdrawal, or an order.
	found, err := d.finder().Find(ctx, ops.RecordID(id))
	switch {
	case errors.Is(err, ops.ErrNotFound):
		out["record"] = nil
	case err != nil:
		return nil, d.failed(err)
	default:
		out["record"] = foundJSON(found)
	}
	return out, nil
}

type moveBody struct {
	Queue   string   `json:"queue"`
	IDs     []string `json:"ids"`
	All     bool     `json:"all"`
	Confirm bool     `json:"confirm"`
}

func (d Dashboard) deadMove(ctx context.Context, r *http.Request, how ops.Move) (any, *apiProblem) {
	var b moveBody
	if p := decode(r, &b); p != nil {
		return nil, p
	}
	var v validation.Error
	if b.Queue == "" {
		v.Add("queue", "name the queue (withdrawals, sk:<item>, seckill-events)")
	}
	if b.All == (len(b.IDs) > 0) {
		v.Add("ids", `name the jobs ("ids") or take them all ("all": true), not both`)
	}
	if len(b.IDs) > delayq.MaxBatch {
		v.Add("ids", "at most %d ids at once", delayq.MaxBatch)
	}
	for _, id := range b.IDs {
		if id == "" || len(id) > 512 {
			v.Add("ids", "an id is 1 to 512 characters")
			break
		}
	}
	if how == ops.Requeue && b.Confirm {
		v.Add("confirm", "only a purge is confirmed")
	}
	if err := v.Err(); err != nil {
		return nil, d.failed(err)
	}
	if how == ops.Purge && !b.Confirm {
		return nil, problemOf(http.StatusBadRequest, CodeConfirmationRequired,
			`a purge deletes dead jobs for good: send "confirm": true once a person said yes`)
	}
	qs, p := d.queues(ctx, b.Queue)
	if p != nil {
		return nil, p
	}
	q := qs[0]
	ids := ops.Dedupe(b.IDs)
	if len(ids) > 0 {
		// Nothing half-done: if one named job is not dead, none is moved.
		dead, err := deadPlaces(ctx, q, ids)
		if err != nil {
			return nil, d.failed(err)
		}
		var missing []string
		for _, id := range ids {
			if _, ok := dead[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return nil, problemOf(http.StatusNotFound, CodeNotDead,
				"not in the dead set of "+q.Name()+": "+strings.Join(missing, ", ")+"; nothing moved")
		}
	}
	m, err := ops.MoveDead(ctx, q, how, d.App.Clock.Now(), 500, ids, nil)
	if err != nil {
		return nil, d.failed(err)
	}
	d.App.Log.Warn("dead jobs moved from the dashboard", "queue", q.Name(), "move", string(how), "jobs", len(m.IDs))
	return map[string]any{"queue": q.Name(), "move": how, "moved": nonNil(m.IDs), "not_dead": nonNil(m.NotDead)}, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// ---- payouts ----

func (d Dashboard) payouts(ctx context.Context, _ *http.Request) (any, *apiProblem) {
	cfg := d.App.Config
	rows, err := ops.ListUnresolved(ctx, d.App.Service, cfg.MaxAttempts, cfg.PayoutIdempotencyWindow, d.App.Clock.Now())
	if err != nil {
		return nil, d.failed(err)
	}
	type row struct {
		ops.Unresolved
		Record httpapi.OperatorView `json:"record"`
	}
	out := make([]row, len(rows))
	for i, r := range rows {
		out[i] = row{Unresolved: r, Record: httpapi.OperatorViewOf(r.Record)}
	}
	return map[string]any{"withdrawals": out, "max_attempts": cfg.MaxAttempts,
		"idempotency_window_seconds": cfg.PayoutIdempotencyWindow.Seconds()}, nil
}

type resolveBody struct {
	ID       string `json:"id"`
	Revision *int64 `json:"revision"`
	PayoutID string `json:"payout_id"`
	Reason   string `json:"reason"`
}

func (d Dashboard) resolve(ctx context.Context, r *http.Request) (any, *apiProblem) {
	var b resolveBody
	if p := decode(r, &b); p != nil {
		return nil, p
	}
	if b.ID == "" {
		return nil, d.failed(validation.New("id", "name the withdrawal"))
	}
	w, err := ops.Resolve(ctx, d.App.Service, b.ID,
		ops.Verdict{PayoutID: b.PayoutID, Reason: b.Reason, By: DashboardBy, Revision: b.Revision}, d.App.Config.MaxAttempts)
	if err != nil {
		return nil, d.failed(err)
	}
	return map[string]any{"withdrawal": httpapi.OperatorViewOf(w), "finance": "finance will be told"}, nil
}

// ---- lookup ----

func (d Dashboard) finder() ops.Finder {
	return ops.Finder{Ledger: d.App.Ledger, Withdrawals: d.App.Withdrawals, Orders: d.App.Orders, Queues: d.App.Queues}
}

func (d Dashboard) lookup(ctx context.Context, r *http.Request) (any, *apiProblem) {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	if id == "" || len(id) > 128 {
		return nil, problemOf(http.StatusBadRequest, httpapi.CodeValidationFailed,
			"give ?id=: a withdrawal id (wd_…), an order id (or_…) or a purchase id (pu_…)")
	}
	found, err := d.finder().Find(ctx, id)
	if err != nil {
		return nil, d.failed(err)
	}
	return foundJSON(found), nil
}

type placeJSON struct {
	Queue string `json:"queue"`
	Shard int    `json:"shard"`
	ID    string `json:"id"`
	State string `json:"state"`
	At    string `json:"at"`
}

type orderJSON struct {
	ID         string `json:"id"`
	PurchaseID string `json:"purchase_id"`
	ItemID     string `json:"item_id"`
	UserID     string `json:"user_id"`
	Quantity   int    `json:"quantity"`
	Shard      int    `json:"shard"`
	CreatedAt  string `json:"created_at"`
	Amount     string `json:"amount,omitempty"`
	Currency   string `json:"currency,omitempty"`
	PayBy      string `json:"pay_by,omitempty"`
	End        string `json:"end,omitempty"`
	EndedAt    string `json:"ended_at,omitempty"`
}

func orderOf(o seckill.Order) orderJSON {
	out := orderJSON{ID: o.ID, PurchaseID: o.PurchaseID, ItemID: o.ItemID, UserID: o.UserID, Quantity: o.Quantity,
		Shard: o.Shard, CreatedAt: clock.Format(o.CreatedAt), Amount: o.Amount, Currency: o.Currency, End: string(o.End)}
	if !o.PayBy.IsZero() {
		out.PayBy = clock.Format(o.PayBy)
	}
	if !o.EndedAt.IsZero() {
		out.EndedAt = clock.Format(o.EndedAt)
	}
	return out
}

func foundJSON(f ops.Found) map[string]any {
	jobs := make([]placeJSON, len(f.Jobs))
	for i, p := range f.Jobs {
		jobs[i] = placeJSON{Queue: p.Queue, Shard: p.Shard, ID: p.ID, State: p.State, At: clock.Format(p.At)}
	}
	out := map[string]any{"kind": f.Kind, "jobs": jobs}
	if f.Kind == "withdrawal" {
		out["withdrawal"] = httpapi.OperatorViewOf(f.Withdrawal)
	} else {
		out["order"] = orderOf(f.Order)
	}
	return out
}
