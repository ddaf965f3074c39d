package dispatch_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/hourglass/hourglass/shared/dispatch"
)

// hungSQS is an SQS endpoint that reads each request and never answers
// (until the test ends); it counts the requests it got.
func hungSQS(t *testing.T) (*sqs.Client, chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	got := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") != "AmazonSQS.SendMessageBatch" {
			t.Errorf("target %q", r.Header.Get("X-Amz-Target"))
		}
		got <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return sqs.New(sqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
	}), got
}

// A SendMessageBatch that never answers fails within the call timeout, with
// a timeout error, and every job of it is refused (so the poller re-schedules
// it): a hung SQS cannot hold a poller round.
func TestHungSQSCallTimesOutAndRefusesItsJobs(t *testing.T) {
	api, got := hungSQS(t)
	d := newDispatcher(t, api, dispatch.WithCallTimeout(100*time.Millisecond))
	jobs := makeJobs(15)
	type result struct {
		refused int
		err     error
	}
	done := make(chan result, 1)
	go func() {
		refused, err := d.Dispatch(context.Background(), jobs) // no deadline of its own
		done <- result{len(refused), err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Dispatch did not return: the call has no timeout")
	}
	if len(got) == 0 {
		t.Fatal("SQS never got a request")
	}
	if r.refused != len(jobs) || !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("Dispatch refused %d of %d, err %v; want all refused with a timeout", r.refused, len(jobs), r.err)
	}
	t.Log(r.err)
}

func TestNewSQSRefusesANonPositiveCallTimeout(t *testing.T) {
	api, _ := hungSQS(t)
	if _, err := dispatch.NewSQS(api, testQueueURL, dispatch.WithCallTimeout(0)); err == nil {
		t.Fatal("NewSQS took a zero call timeout")
	}
}
