package finance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

var _ withdrawal.Notifier = (*Log)(nil)

// Log writes each message as one JSON line, for the local stack when no
// webhook is configured: the message's fields, then "dedup_key" (DedupKey).
// It is safe for concurrent use.
type Log struct {
	mu sync.Mutex
	w  io.Writer
}

// logLine is one line of Log: the message as every adapter sends it, with
// its key beside it where a webhook has a header and SNS an attribute.
type logLine struct {
	withdrawal.Processed
	DedupKey string `json:"dedup_key"`
}

// NewLog returns a Log writing to w.
func NewLog(w io.Writer) *Log { return &Log{w: w} }

// Notify writes m as one line in a single Write, so lines never interleave.
func (l *Log) Notify(_ context.Context, m withdrawal.Processed) error {
	if err := check(m); err != nil {
		return err
	}
	key := DedupKey(m)
	b, err := json.Marshal(logLine{Processed: m, DedupKey: key})
	if err != nil {
		return fmt.Errorf("finance: encode %s: %w", key, err)
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(b); err != nil {
		return fmt.Errorf("finance: log %s: %w", key, err)
	}
	return nil
}
