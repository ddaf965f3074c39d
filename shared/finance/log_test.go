package finance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

func TestLogWritesOneJSONLinePerMessage(t *testing.T) {
	var buf bytes.Buffer
	l := NewLog(&buf)
	failed := message(t, "wd-2")
	failed.Status, failed.PayoutID = withdrawal.Failed, ""
	want := []withdrawal.Processed{message(t, "wd-1"), failed}
	for _, m := range want {
		if err := l.Notify(context.Background(), m); err != nil {
			t.Fatalf("Notify(%s): %v", m.WithdrawalID, err)
		}
	}

	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	keys := []string{"wd-1:paid", "wd-2:failed"}
	for i, line := range lines {
		// The message as every adapter sends it, then its key.
		exact, _ := json.Marshal(want[i])
		exact = append(bytes.TrimSuffix(exact, []byte("}")), `,"dedup_key":"`+keys[i]+`"}`...)
		if !bytes.Equal(line, exact) {
			t.Errorf("line %d = %s, want %s", i, line, exact)
		}
		var got withdrawal.Processed
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("line %d does not parse: %v", i, err)
		}
		if diff := cmp.Diff(want[i], got); diff != "" {
			t.Errorf("line %d (-want +got):\n%s", i, diff)
		}
	}
}

func TestLogConcurrentNotifyWritesWholeLines(t *testing.T) {
	const n = 64
	var buf bytes.Buffer // not safe for concurrent use: -race checks the mutex
	l := NewLog(&buf)
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- l.Notify(context.Background(), message(t, fmt.Sprintf("wd-%03d", i)))
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Notify: %v", err)
		}
	}

	var ids, want []string
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var m withdrawal.Processed
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("torn line %q: %v", sc.Text(), err)
		}
		ids = append(ids, m.WithdrawalID)
	}
	for i := range n {
		want = append(want, fmt.Sprintf("wd-%03d", i))
	}
	sort.Strings(ids)
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestLogErrors(t *testing.T) {
	tests := []struct {
		name string
		w    *Log
		m    withdrawal.Processed
	}{
		{"write fails", NewLog(failingWriter{}), message(t, "wd-1")},
		{"no withdrawal id", NewLog(&bytes.Buffer{}), message(t, "")},
		{"no status", NewLog(&bytes.Buffer{}), withdrawal.Processed{Type: withdrawal.ProcessedType, WithdrawalID: "wd-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.w.Notify(context.Background(), tt.m); err == nil {
				t.Fatal("Notify succeeded, want an error")
			}
		})
	}
}
