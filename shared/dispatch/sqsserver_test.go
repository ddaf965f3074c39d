package dispatch_test

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// sqsServer speaks the SQS JSON protocol (awsJson1_0) for SendMessageBatch, as
// the SDK's request and response snapshots show it. It returns correct
// MD5OfMessageBody values, so the client's checksum validation stays on.
type sqsServer struct {
	t   testing.TB
	srv *httptest.Server

	// decide, if set, says whether entry id of call n (0-based) succeeds;
	// fail, if set, makes call n fail as a whole with HTTP 500.
	decide func(call int, id string) bool
	fail   func(call int, entries []sqsEntry) bool
	// hold keeps each call open this long, so calls overlap.
	hold time.Duration

	calls    atomic.Int64
	inFlight atomic.Int64
	maxSeen  atomic.Int64

	mu       sync.Mutex
	requests []sqsRequest
}

type sqsRequest struct {
	QueueUrl string
	Entries  []sqsEntry
}

type sqsEntry struct {
	Id                string
	MessageBody       string
	MessageAttributes map[string]sqsAttr
	DelaySeconds      *int `json:",omitempty"`
}

type sqsAttr struct {
	DataType    string
	StringValue string
}

type sqsResultEntry struct {
	Id               string
	MessageId        string
	MD5OfMessageBody string
}

type sqsErrorEntry struct {
	Id          string
	SenderFault bool
	Code        string
	Message     string
}

func newSQSServer(t testing.TB) *sqsServer {
	t.Helper()
	s := &sqsServer{t: t}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sqsServer) serve(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxSeen.Load()
		if n <= m || s.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	call := int(s.calls.Add(1) - 1)
	if s.hold > 0 {
		time.Sleep(s.hold)
	}

	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-amz-json-1.0" ||
		r.Header.Get("X-Amz-Target") != "AmazonSQS.SendMessageBatch" {
		s.jsonError(w, http.StatusBadRequest, "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation;Sender",
			fmt.Sprintf("unexpected %s %q target %q", r.Method, r.Header.Get("Content-Type"), r.Header.Get("X-Amz-Target")))
		return
	}
	if r.Header.Get("Authorization") == "" {
		s.jsonError(w, http.StatusForbidden, "MissingAuthenticationToken", "", "request is not signed")
		return
	}
	var req sqsRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.jsonError(w, http.StatusBadRequest, "InvalidParameterValue", "", err.Error())
		return
	}
	if len(req.Entries) == 0 || len(req.Entries) > 10 {
		s.jsonError(w, http.StatusBadRequest, "TooManyEntriesInBatchRequest",
			"AWS.SimpleQueueService.TooManyEntriesInBatchRequest;Sender", strconv.Itoa(len(req.Entries)))
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()

	if s.fail != nil && s.fail(call, req.Entries) {
		s.jsonError(w, http.StatusInternalServerError, "com.amazonaws.sqs#InternalError",
			"InternalError;Receiver", "We encountered an internal error. Please try again.")
		return
	}

	out := struct {
		Successful []sqsResultEntry
		Failed     []sqsErrorEntry
	}{Successful: []sqsResultEntry{}, Failed: []sqsErrorEntry{}}
	for _, e := range req.Entries {
		if s.decide != nil && !s.decide(call, e.Id) {
			out.Failed = append(out.Failed, sqsErrorEntry{
				Id: e.Id, Code: "InternalError", Message: "entry refused by test server",
			})
			continue
		}
		sum := md5.Sum([]byte(e.MessageBody))
		out.Successful = append(out.Successful, sqsResultEntry{
			Id: e.Id, MessageId: fmt.Sprintf("msg-%d-%s", call, e.Id), MD5OfMessageBody: hex.EncodeToString(sum[:]),
		})
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

// jsonError writes an awsJson1_0 error: {"__type","message"}, with the
// query-compatible error code header SQS sends beside it.
func (s *sqsServer) jsonError(w http.ResponseWriter, status int, typ, queryErr, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if queryErr != "" {
		w.Header().Set("X-Amzn-Query-Error", queryErr)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
}

func (s *sqsServer) recorded() []sqsRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sqsRequest(nil), s.requests...)
}

// client is a real SQS client of the server: no retries, so a failure shows.
func (s *sqsServer) client() *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
		Retryer:      aws.NopRetryer{},
		HTTPClient:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	})
}

const testQueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/hourglass-work"
