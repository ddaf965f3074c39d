package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/internal/apievent"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/seckill"
)

// BenchmarkPurchaseRateLimits measures what the rate limits add to a flash-
// sale admission through the router (every call admits a new user, 50
// concurrent callers, one redis-server): with the limits off, per user, and
// per user and per source. Compare ns/op:
//
//	go test -run '^$' -bench PurchaseRateLimits -benchtime 20000x ./shared/httpapi/
func BenchmarkPurchaseRateLimits(b *testing.B) {
	srv := redistest.Start(b)
	for _, bc := range []struct {
		name string
		vars map[string]string
	}{
		{"off", nil},
		{"per-user", map[string]string{"HOURGLASS_RATE_PURCHASE_USER": "5/s"}},
		{"per-user-and-source", map[string]string{
			"HOURGLASS_RATE_PURCHASE_USER": "5/s", "HOURGLASS_RATE_PURCHASE_SOURCE": "1000000/s",
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.Setenv("HOURGLASS_AUTH", "dev")
			b.Setenv("HOURGLASS_LOG_LEVEL", "error")
			for _, k := range []string{"HOURGLASS_RATE_PURCHASE_USER", "HOURGLASS_RATE_PURCHASE_SOURCE"} {
				b.Setenv(k, bc.vars[k])
			}
			a := benchApp(b, srv, config.Local)
			rt := a.Router()
			item := "bench-" + bc.name
			sale := seckill.Sale{ItemID: item, Stock: 10_000_000, EndsAt: time.Now().Add(time.Hour)}
			if _, err := a.Seckill.Preheat(context.Background(), sale); err != nil {
				b.Fatal(err)
			}
			path := "/v1/seckill/items/" + item + "/purchases"
			var next atomic.Int64
			var refused atomic.Int64
			b.SetParallelism(25) // 50 callers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					ev := events.APIGatewayV2HTTPRequest{
						RawPath: path,
						Headers: map[string]string{"x-user-id": "user-" + strconv.FormatInt(i, 10)},
						RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
							Method: "POST", Path: path, SourceIP: fmt.Sprintf("198.51.%d.%d", (i/256)%256, i%256),
						}},
					}
					resp, _ := rt.Serve(context.Background(), ev)
					if resp.StatusCode != 202 {
						refused.Add(1)
					}
				}
			})
			b.StopTimer()
			if n := refused.Load(); n > 0 {
				b.Fatalf("%d purchases not admitted", n)
			}
		})
	}
}

// handlerApp is the App a Lambda function builds (config.Lambda: jwt auth,
// the user from the authorizer's claims, logs as JSON lines at info), on
// srv, with the rate limits off: they are Redis round trips of their own
// (see BenchmarkPurchaseRateLimits).
func handlerApp(b *testing.B, srv *redistest.Server) *app.App {
	b.Helper()
	b.Setenv("HOURGLASS_AUTH", "jwt")
	b.Setenv("HOURGLASS_ORDER_BACKLOG", "10000000") // no consumer makes the orders
	for _, k := range []string{"HOURGLASS_RATE_PURCHASE_USER", "HOURGLASS_RATE_PURCHASE_SOURCE",
		"HOURGLASS_RATE_WITHDRAWAL_USER", "HOURGLASS_RATE_WITHDRAWAL_SOURCE"} {
		b.Setenv(k, "off")
	}
	return benchApp(b, srv, config.Lambda)
}

// benchApp is the App of profile p on a flushed srv, as the environment
// set so far configures it, logging as JSON lines to nowhere.
func benchApp(b *testing.B, srv *redistest.Server, p config.Profile) *app.App {
	b.Helper()
	b.Setenv("REDIS_URL", srv.URL())
	cfg, err := config.Load(p)
	if err != nil {
		b.Fatal(err)
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	a, err := app.New(cfg, app.NewLogger(io.Discard, cfg.SlogLevel()), rdb)
	if err != nil {
		b.Fatal(err)
	}
	return a
}

// BenchmarkHandler is the handler path as a Lambda function runs it
// (lambda.Start(router) in functions/seckill and functions/enqueue): the
// API Gateway v2 event as JSON bytes through lambda.NewHandler(router), the
// router's decoding, routing, the service, Redis, and the response encoded
// to JSON. Every purchase admits a new buyer and every create carries a new
// Idempotency-Key. "via-Serve" is the same through lambda.NewHandler(rt.Serve),
// the library's reflection and encoding/json, to compare in one run. One
// caller, so that a profile shows the handler's own work (the rest is
// waiting on Redis):
//
//	go test -run '^$' -bench Handler -benchmem -cpuprofile cpu.out ./shared/httpapi/
//	go tool pprof -top httpapi.test cpu.out
func BenchmarkHandler(b *testing.B) {
	srv := redistest.Start(b)
	for _, via := range []string{"router", "via-Serve"} {
		handler := func(rt *httpapi.Router) lambda.Handler {
			if via == "via-Serve" {
				return lambda.NewHandler(rt.Serve)
			}
			return lambda.NewHandler(rt)
		}
		b.Run("purchase/"+via, func(b *testing.B) {
			a := handlerApp(b, srv)
			sale := seckill.Sale{ItemID: "bench-item", Stock: 10_000_000, EndsAt: time.Now().Add(time.Hour)}
			if _, err := a.Seckill.Preheat(context.Background(), sale); err != nil {
				b.Fatal(err)
			}
			h := handler(a.SeckillAPI())
			runHandler(b, h, func(buf []byte, i string) []byte {
				return apievent.Purchase(buf, "bench-item", "user-"+i, "req-"+i)
			})
		})
		b.Run("create/"+via, func(b *testing.B) {
			a := handlerApp(b, srv)
			h := handler(a.WithdrawalAPI())
			runHandler(b, h, func(buf []byte, i string) []byte {
				return apievent.Create(buf, "user-"+i, "key-"+i, "req-"+i)
			})
		})
	}
}

func runHandler(b *testing.B, h lambda.Handler, event func(buf []byte, i string) []byte) {
	b.Helper()
	ctx := context.Background()
	var buf []byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		buf = event(buf[:0], strconv.Itoa(i))
		out, err := h.Invoke(ctx, buf)
		if err != nil || !bytes.HasPrefix(out, []byte(`{"statusCode":202,`)) {
			b.Fatalf("answer %s, %v", out, err)
		}
	}
}
