package orders

import (
	"context"
	"log/slog"
)

var _ Publisher = (*Log)(nil)

// LogMessage is the message of every line Log writes.
const LogMessage = "order event"

// Log writes each event as one JSON log line through slog, for the local
// stack when no webhook is configured: {"msg":"order event","key":…,
// "event":{…the full event…}}. It is safe for concurrent use (slog's
// handlers write each record in one call).
type Log struct {
	log *slog.Logger
}

// NewLog returns a Log writing through log.
func NewLog(log *slog.Logger) *Log { return &Log{log: log} }

// Publish logs e.
func (l *Log) Publish(ctx context.Context, e Event) error {
	if _, err := encode(e); err != nil {
		return err
	}
	l.log.LogAttrs(ctx, slog.LevelInfo, LogMessage, slog.String("key", e.Key()), slog.Any("event", e))
	return nil
}
