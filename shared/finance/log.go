package finance

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

var _ withdrawal.Notifier = (*Log)(nil)

// Log writes each message as one JSON line, for the local stack when no
// webhook is configured. It is safe for concurrent use.
type Log struct {
	mu sync.Mutex
	w  io.Writer
}

// NewLog returns a Log writing to w.
func NewLog(w io.Writer) *Log { return &Log{w: w} }

// Notify writes m as one line in a single Write, so lines never interleave.
func (l *Log) Notify(_ context.Context, m withdrawal.Processed) error {
	b, err := encode(m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(b); err != nil {
		return fmt.Errorf("finance: log %s: %w", m.WithdrawalID, err)
	}
	return nil
}
