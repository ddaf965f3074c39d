package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// TestPayoutCallbackForAnUnknownWithdrawal: a signed callback about no
// withdrawal of ours (an id never created, or not one of ours at all) is
// refused 404 and, since the provider paid or refused something nobody
// here asked for, logged at error and counted (PayoutCallbacks with Result
// unknown, which alarms: CallbacksUnknownAlarm).
func TestPayoutCallbackForAnUnknownWithdrawal(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)
		emf := &lockedBuffer{}
		s.app.EmitMetricsTo(emf)
		never := withdrawal.NewID(time.Now())
		for _, id := range []string{never, "garbage"} {
			checkProblem(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-"+id, id, "paid"), time.Time{})),
				want{status: 404, code: "not_found"})
		}
		var logged, counted int
		for l := range strings.Lines(s.log.String()) {
			if strings.Contains(l, `"level":"ERROR"`) && strings.Contains(l, "unknown withdrawal") {
				logged++
			}
		}
		for l := range strings.Lines(emf.String()) {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m[metrics.PayoutCallbacks] == 1.0 && m["Result"] == metrics.CallbackUnknown {
				counted++
			}
		}
		if logged != 2 || counted != 2 {
			t.Fatalf("2 callbacks about unknown withdrawals: %d error lines, %d counted; want 2 each\nlogs:\n%s\nmetrics:\n%s",
				logged, counted, s.log.String(), emf.String())
		}
		if !strings.Contains(s.log.String(), never) {
			t.Errorf("the error line does not name the withdrawal %s", never)
		}
	})
}
