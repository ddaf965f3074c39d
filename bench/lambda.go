package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/rie"
)

var (
	emulator   = flag.String("rie", "bin/aws-lambda-rie", "the Lambda runtime interface emulator (make bench installs it)")
	bootstraps = flag.String("bootstraps", "bin/host", "directory of the functions' bootstraps built for this machine (<fn>/bootstrap)")
)

// benchLambda measures each function's bootstrap size and its cold-start
// init duration under the Lambda runtime interface emulator, on the
// benchmark's Redis.
func benchLambda(ctx context.Context, _ redis.UniversalClient, srv *server, rep *report, _ bool) error {
	return run(func(h *harness) error { return lambdaColdStarts(ctx, h, srv, rep) })
}

// functionEnv is the functions' environment as deployed: the keys from
// Secrets Manager (a stand-in on loopback; a cold start reads them, as in
// AWS), each channel's its own, the outbound URLs https (never called
// here). A function refuses to start on less.
func functionEnv(h *harness, srv *server) []string {
	sm := fakes.NewSecretStore(map[string]string{
		"bench/payout-signing": "bench-payout-signing", "bench/finance-signing": "bench-finance-signing",
		"bench/payout-webhook": "bench-payout-webhook", "bench/payments-webhook": "bench-payments-webhook",
	})
	return []string{
		"REDIS_URL=redis://" + srv.addr, "HOURGLASS_AUTH=jwt", "HOURGLASS_LOG_LEVEL=warn",
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=bench", "AWS_SECRET_ACCESS_KEY=bench",
		"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + sm.Serve(h),
		"WORK_QUEUE_URL=http://127.0.0.1:9/000000000000/work", "HOURGLASS_POLLER_MARGIN=2500ms",
		"PAYOUT_URL=https://127.0.0.1:9/pay", "FINANCE_WEBHOOK_URL=https://127.0.0.1:9/finance",
		"PAYOUT_SIGNING_SECRET_ID=bench/payout-signing", "FINANCE_SIGNING_SECRET_ID=bench/finance-signing",
		"PAYOUT_WEBHOOK_SECRET_ID=bench/payout-webhook", "PAYMENTS_WEBHOOK_SECRET_ID=bench/payments-webhook",
	}
}

func lambdaColdStarts(ctx context.Context, h *harness, srv *server, rep *report) error {
	env := functionEnv(h, srv)
	events := map[string]string{
		"enqueue": "events/healthz.json", "seckill": "events/seckill-item.json",
		"poller": "events/poller-scheduled.json", "consumer": "",
	}
	for _, fn := range []string{"enqueue", "seckill", "poller", "consumer"} {
		boot := filepath.Join(*bootstraps, fn, "bootstrap")
		info, err := os.Stat(boot)
		if err != nil {
			return fmt.Errorf("%s: %w (make bench builds it)", fn, err)
		}
		payload := []byte(`{"Records":[]}`)
		if events[fn] != "" {
			if payload, err = os.ReadFile(events[fn]); err != nil {
				return err
			}
		}
		f, err := rie.Start(fn, rie.Options{Emulator: *emulator, Bootstrap: boot, Env: env, Timeout: 3 * time.Second})
		if err != nil {
			return err
		}
		_, ierr := f.Invoke(ctx, payload)
		var initDur time.Duration
		var ok bool
		for range 100 { // the emulator logs its report just after answering
			if initDur, _, ok = f.ColdStart(); ok {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		f.Stop()
		if ierr != nil {
			return fmt.Errorf("%s: %w", fn, ierr)
		}
		if !ok {
			return fmt.Errorf("%s: the emulator reported no init duration", fn)
		}
		ms := float64(initDur.Microseconds()) / 1000
		rep.add(row{Key: "init_ms_" + fn, Figure: fmt.Sprintf("%s: cold-start init under the emulator (ms)", fn), Value: ms,
			Target: "< 50 ms", Met: met(ms < 50)})
		rep.add(row{Key: "binary_mib_" + fn, Figure: fmt.Sprintf("%s: stripped bootstrap, %s/%s (MiB)", fn, runtime.GOOS, runtime.GOARCH),
			Value: float64(info.Size()) / (1 << 20)})
	}
	return nil
}
