package rie

import (
	"strings"
	"testing"
	"time"
)

// A cold and a warm invocation as aws-lambda-rie logs them.
const emulatorLog = `29 Nov 2026 11:43:08,572 [INFO] (rapid) exec '/tmp/rie/enqueue/bootstrap' (cwd=/work/main, handler=)
START RequestId: c2d51821-282c-439c-bbbb-f5bceec1621f Version: $LATEST
29 Nov 2026 11:43:09,588 [INFO] (rapid) INIT START(type: on-demand, phase: init)
29 Nov 2026 11:43:09,597 [INFO] (rapid) INIT RTDONE(status: success)
29 Nov 2026 11:43:09,597 [INFO] (rapid) INIT REPORT(durationMs: 9.008000)
29 Nov 2026 11:43:09,597 [INFO] (rapid) INVOKE START(requestId: c2d51821-282c-439c-bbbb-f5bceec1621f)
{"time":"2026-11-29T11:43:09.611496782Z","level":"INFO","msg":"request","status":503}
END RequestId: c2d51821-282c-439c-bbbb-f5bceec1621f
REPORT RequestId: c2d51821-282c-439c-bbbb-f5bceec1621f	Init Duration: 0.83 ms	Duration: 24.36 ms	Billed Duration: 25 ms	Memory Size: 3008 MB	Max Memory Used: 3008 MB	
START RequestId: 10211168-2dc8-4846-a6ff-6804584e42fc Version: $LATEST
END RequestId: 10211168-2dc8-4846-a6ff-6804584e42fc
REPORT RequestId: 10211168-2dc8-4846-a6ff-6804584e42fc	Duration: 20.88 ms	Billed Duration: 21 ms	Memory Size: 3008 MB	Max Memory Used: 3008 MB	
`

func TestScanReadsTheEmulatorsReports(t *testing.T) {
	f := &Function{}
	f.scan(strings.NewReader(emulatorLog), nil)
	got := f.Reports()
	// The REPORT line's "Init Duration" only times the emulator's own step;
	// the INIT REPORT line times the bootstrap's start.
	want := []Report{
		{Init: 9008 * time.Microsecond, Duration: 24360 * time.Microsecond},
		{Duration: 20880 * time.Microsecond},
	}
	if len(got) != len(want) {
		t.Fatalf("reports %+v, want %+v", got, want)
	}
	for i := range want {
		if (got[i].Init-want[i].Init).Abs() > time.Microsecond || (got[i].Duration-want[i].Duration).Abs() > time.Microsecond {
			t.Errorf("report %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if !strings.Contains(f.Log(), `"status":503`) {
		t.Error("the function's own output is not kept")
	}
}

func TestFunctionError(t *testing.T) {
	if msg, ok := functionError([]byte(`{"errorMessage":"boom","errorType":"errorString"}`)); !ok || msg != "errorString: boom" {
		t.Errorf("functionError = %q, %v", msg, ok)
	}
	for _, body := range []string{`{"statusCode":200,"body":"{}"}`, `{"batchItemFailures":[]}`, `not json`} {
		if _, ok := functionError([]byte(body)); ok {
			t.Errorf("%s taken for an error", body)
		}
	}
}
