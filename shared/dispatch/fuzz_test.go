package dispatch_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/hourglass/hourglass/shared/dispatch"
)

// FuzzDecodeJob: a work-queue message body is either refused as
// ErrInvalidJob (never retried) or decodes to a job every consumer can act
// on, which encodes back to a body that decodes to the same job.
func FuzzDecodeJob(f *testing.F) {
	for _, s := range []string{
		`{"kind":"withdrawal.payout","queue":"withdrawals","shard":0,"id":"wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z","due_ms":1795946400000,"lease":1795946430000}`,
		`{"kind":"seckill.order","queue":"sk:phone-2026","shard":3,"id":"pu_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z","due_ms":1}`,
		`{"kind":"x","queue":"q","shard":-1,"id":"i","due_ms":0}`,
		`{"kind":"x","queue":"q","shard":1e1,"id":"i","due_ms":0}`,
		`{"kind":"x","queue":"q","shard":0,"id":"i","due_ms":0,"extra":1}`,
		`{"kind":"x","queue":"q","shard":0,"id":"i","due_ms":0} {}`,
		`{"kind":"x","kind":"y","queue":"q","shard":0,"id":"i"}`,
		`null`, `[]`, ``, `{"kind":null,"queue":"q","id":"i"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		job, err := dispatch.DecodeJob(body)
		if err != nil {
			if !errors.Is(err, dispatch.ErrInvalidJob) {
				t.Fatalf("refusal is not ErrInvalidJob: %v", err)
			}
			return
		}
		if job.Kind == "" || job.Queue == "" || job.ID == "" || job.Shard < 0 {
			t.Fatalf("accepted an unusable job %+v", job)
		}
		enc, err := json.Marshal(job)
		if err != nil {
			t.Fatal(err)
		}
		again, err := dispatch.DecodeJob(string(enc))
		if err != nil || again != job {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, job)
		}
	})
}
