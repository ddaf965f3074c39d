// Package correlation carries the id that ties together every log line and
// message about one withdrawal or order, whichever process writes it: the
// request id of the API call that created it (API Gateway's
// requestContext.requestId). The API edge puts it in the request's context,
// the create stores it on the record, and each later step (consumer, payout
// provider, finance) reads it back from the record.
package correlation

import (
	"context"
	"log/slog"
	"sync"
)

// Key is the slog attribute, and the JSON field of outbound messages, that
// carry the id.
const Key = "request_id"

// Header is the HTTP header that carries the id on outbound calls (the payout
// provider, the finance webhook) and on API responses.
const Header = "X-Request-Id"

type ctxKey struct{}

// holder is mutable so that a step which learns the id late (the consumer,
// once it has read the record) tells its callers too: the consumer's own
// lines about the job then carry it.
type holder struct {
	mu sync.Mutex
	id string
}

// Track returns ctx with room for an id that a callee learns later (With
// records it there); ID(ctx) reads it back once the callee returns.
func Track(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, &holder{})
}

// With returns a context carrying id: ctx itself if it came from Track or
// With (the id is recorded there, for the callers to see), else a child of
// ctx. An empty id changes nothing.
func With(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	if h, ok := ctx.Value(ctxKey{}).(*holder); ok {
		h.mu.Lock()
		h.id = id
		h.mu.Unlock()
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, &holder{id: id})
}

// ID returns the id ctx carries, or "".
func ID(ctx context.Context) string {
	h, ok := ctx.Value(ctxKey{}).(*holder)
	if !ok {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.id
}

// Logger returns log with the request_id attribute id, or log itself when
// id is empty (a record written before ids were kept).
func Logger(log *slog.Logger, id string) *slog.Logger {
	if id == "" {
		return log
	}
	return log.With(Key, id)
}

// Info writes one line at info as Logger(log, id).LogAttrs would write it
// (the id's attribute first, none when id is empty), without building a
// logger for it: for a line on a hot path, such as each admitted purchase.
func Info(log *slog.Logger, id, msg string, attrs ...slog.Attr) {
	bg := context.Background()
	if !log.Enabled(bg, slog.LevelInfo) {
		return
	}
	if id != "" {
		var buf [8]slog.Attr
		attrs = append(append(buf[:0], slog.String(Key, id)), attrs...)
	}
	log.LogAttrs(bg, slog.LevelInfo, msg, attrs...)
}
