// Package sqsfake is an SQS endpoint for tests: an HTTP server speaking SQS's
// JSON protocol (awsJson1_0) for SendMessageBatch, which is all the poller
// sends, SendMessage and GetQueueAttributes (hourglass smoke's), and a queue
// behind it that hands the accepted messages out the way
// Lambda's SQS event source does (see EventSource). Point a real SDK client at
// it with Client, or a process with AWS_ENDPOINT_URL_SQS=URL.
package sqsfake

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/hourglass/hourglass/internal/fakes"
)

// QueueURL is a well-formed queue URL to configure clients with; the server
// accepts any.
const QueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/hourglass-work"

// Server records every SendMessageBatch request and queues the entries it
// accepts. It returns correct MD5OfMessageBody values, so the client's
// checksum validation stays on. Set the hooks before the first request.
type Server struct {
	// URL is the endpoint (http://127.0.0.1:port).
	URL string

	// Decide, if set, says whether entry id of call n (0-based) is accepted;
	// a refused entry is listed as Failed.
	Decide func(call int, id string) bool
	// Fail, if set, makes call n fail as a whole with HTTP 500.
	Fail func(call int, entries []Entry) bool
	// Hold keeps each call open this long, so that calls overlap.
	Hold time.Duration
	// Attributes answer GetQueueAttributes (names as SQS spells them,
	// VisibilityTimeout, RedrivePolicy, ...), whatever the queue URL.
	Attributes map[string]string

	// Calls counts the calls; MaxInFlight is the most that were open at once.
	Calls       atomic.Int64
	MaxInFlight atomic.Int64
	// Wire counts the bytes of every call, both ways.
	Wire     fakes.WireBytes
	inFlight atomic.Int64

	mu       sync.Mutex
	requests []Request
	queue    []*message // accepted, in order, until deleted
	seq      int
}

// Request is one SendMessageBatch call as the client sent it.
type Request struct {
	QueueUrl string
	Entries  []Entry
}

// Entry is one message of a SendMessageBatch call.
type Entry struct {
	Id                string
	MessageBody       string
	MessageAttributes map[string]Attr
	DelaySeconds      *int `json:",omitempty"`
}

// Attr is a message attribute.
type Attr struct {
	DataType    string
	StringValue string
}

type resultEntry struct {
	Id               string
	MessageId        string
	MD5OfMessageBody string
}

type errorEntry struct {
	Id          string
	SenderFault bool
	Code        string
	Message     string
}

// message is an accepted entry waiting in the queue.
type message struct {
	id        string
	entry     Entry
	sentAt    time.Time
	receives  int
	visibleAt time.Time
}

// New starts a Server; it stops with the test.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{}
	srv := s.Wire.Serve(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.MaxInFlight.Load()
		if n <= m || s.MaxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	call := int(s.Calls.Add(1) - 1)
	if s.Hold > 0 {
		time.Sleep(s.Hold)
	}

	target := r.Header.Get("X-Amz-Target")
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-amz-json-1.0" ||
		!slices.Contains([]string{"AmazonSQS.SendMessageBatch", "AmazonSQS.SendMessage", "AmazonSQS.GetQueueAttributes"}, target) {
		jsonError(w, http.StatusBadRequest, "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation;Sender",
			fmt.Sprintf("unexpected %s %q target %q", r.Method, r.Header.Get("Content-Type"), target))
		return
	}
	if r.Header.Get("Authorization") == "" {
		jsonError(w, http.StatusForbidden, "MissingAuthenticationToken", "", "request is not signed")
		return
	}
	switch target {
	case "AmazonSQS.SendMessage":
		s.sendOne(w, r, call)
		return
	case "AmazonSQS.GetQueueAttributes":
		s.attributes(w, r)
		return
	}
	var req Request
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		jsonError(w, http.StatusBadRequest, "InvalidParameterValue", "", err.Error())
		return
	}
	if len(req.Entries) == 0 || len(req.Entries) > 10 {
		jsonError(w, http.StatusBadRequest, "TooManyEntriesInBatchRequest",
			"AWS.SimpleQueueService.TooManyEntriesInBatchRequest;Sender", strconv.Itoa(len(req.Entries)))
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()

	if s.Fail != nil && s.Fail(call, req.Entries) {
		jsonError(w, http.StatusInternalServerError, "com.amazonaws.sqs#InternalError",
			"InternalError;Receiver", "We encountered an internal error. Please try again.")
		return
	}

	out := struct {
		Successful []resultEntry
		Failed     []errorEntry
	}{Successful: []resultEntry{}, Failed: []errorEntry{}}
	now := time.Now()
	s.mu.Lock()
	for _, e := range req.Entries {
		if s.Decide != nil && !s.Decide(call, e.Id) {
			out.Failed = append(out.Failed, errorEntry{Id: e.Id, Code: "InternalError", Message: "entry refused by test server"})
			continue
		}
		s.seq++
		id := fmt.Sprintf("msg-%d-%d-%s", s.seq, call, e.Id)
		delay := time.Duration(0)
		if e.DelaySeconds != nil {
			delay = time.Duration(*e.DelaySeconds) * time.Second
		}
		s.queue = append(s.queue, &message{id: id, entry: e, sentAt: now, visibleAt: now.Add(delay)})
		sum := md5.Sum([]byte(e.MessageBody))
		out.Successful = append(out.Successful, resultEntry{Id: e.Id, MessageId: id, MD5OfMessageBody: hex.EncodeToString(sum[:])})
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

// sendOne answers SendMessage: the message joins the queue as a batch's
// entry would, recorded as a request of one entry whose Id is "single".
func (s *Server) sendOne(w http.ResponseWriter, r *http.Request, call int) {
	var in struct {
		QueueUrl string
		Entry
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || in.QueueUrl == "" || in.MessageBody == "" {
		jsonError(w, http.StatusBadRequest, "InvalidParameterValue", "", fmt.Sprintf("SendMessage needs QueueUrl and MessageBody (%v)", err))
		return
	}
	in.Id = "single"
	now := time.Now()
	s.mu.Lock()
	s.requests = append(s.requests, Request{QueueUrl: in.QueueUrl, Entries: []Entry{in.Entry}})
	s.seq++
	id := fmt.Sprintf("msg-%d-%d-%s", s.seq, call, in.Id)
	delay := time.Duration(0)
	if in.DelaySeconds != nil {
		delay = time.Duration(*in.DelaySeconds) * time.Second
	}
	s.queue = append(s.queue, &message{id: id, entry: in.Entry, sentAt: now, visibleAt: now.Add(delay)})
	s.mu.Unlock()
	sum := md5.Sum([]byte(in.MessageBody))
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(map[string]string{"MessageId": id, "MD5OfMessageBody": hex.EncodeToString(sum[:])})
}

// attributes answers GetQueueAttributes from Attributes: the names asked
// for, or every one for "All".
func (s *Server) attributes(w http.ResponseWriter, r *http.Request) {
	var in struct {
		QueueUrl       string
		AttributeNames []string
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.QueueUrl == "" {
		jsonError(w, http.StatusBadRequest, "InvalidParameterValue", "", fmt.Sprintf("GetQueueAttributes needs QueueUrl (%v)", err))
		return
	}
	out := map[string]string{}
	for k, v := range s.Attributes {
		if slices.Contains(in.AttributeNames, k) || slices.Contains(in.AttributeNames, "All") {
			out[k] = v
		}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(map[string]any{"Attributes": out})
}

// jsonError writes an awsJson1_0 error: {"__type","message"}, with the
// query-compatible error code header SQS sends beside it.
func jsonError(w http.ResponseWriter, status int, typ, queryErr, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if queryErr != "" {
		w.Header().Set("X-Amzn-Query-Error", queryErr)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
}

// Requests returns the SendMessageBatch and SendMessage calls recorded so
// far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Client is a real SQS client of the server: no retries, so a failure shows.
func (s *Server) Client() *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
		Retryer:      aws.NopRetryer{},
		HTTPClient:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	})
}

// Receive hands out up to max visible messages, as SQS's ReceiveMessage does
// for the Lambda event source: each becomes invisible for visibility and its
// receive count goes up. A message stays queued until Delete.
func (s *Server) Receive(max int, visibility time.Duration) []events.SQSMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []events.SQSMessage
	for _, m := range s.queue {
		if len(out) == max {
			break
		}
		if m.visibleAt.After(now) {
			continue
		}
		m.receives++
		m.visibleAt = now.Add(visibility)
		out = append(out, m.record(now))
	}
	return out
}

// record is the message as a Lambda SQS event carries it.
func (m *message) record(now time.Time) events.SQSMessage {
	attrs := make(map[string]events.SQSMessageAttribute, len(m.entry.MessageAttributes))
	for k, a := range m.entry.MessageAttributes {
		v := a.StringValue
		attrs[k] = events.SQSMessageAttribute{DataType: a.DataType, StringValue: &v,
			StringListValues: []string{}, BinaryListValues: [][]byte{}}
	}
	sum := md5.Sum([]byte(m.entry.MessageBody))
	return events.SQSMessage{
		MessageId:     m.id,
		ReceiptHandle: m.id + "#" + strconv.Itoa(m.receives),
		Body:          m.entry.MessageBody,
		Md5OfBody:     hex.EncodeToString(sum[:]),
		Attributes: map[string]string{
			"ApproximateReceiveCount":          strconv.Itoa(m.receives),
			"SentTimestamp":                    strconv.FormatInt(m.sentAt.UnixMilli(), 10),
			"SenderId":                         "AROAEXAMPLE:hourglass-poller",
			"ApproximateFirstReceiveTimestamp": strconv.FormatInt(now.UnixMilli(), 10),
		},
		MessageAttributes: attrs,
		EventSource:       "aws:sqs",
		EventSourceARN:    "arn:aws:sqs:us-east-1:123456789012:hourglass-work",
		AWSRegion:         "us-east-1",
	}
}

// Delete removes messages from the queue by message id.
func (s *Server) Delete(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = slices.DeleteFunc(s.queue, func(m *message) bool { return slices.Contains(ids, m.id) })
}

// Release makes messages visible again at once (a changed visibility
// timeout of 0), by message id.
func (s *Server) Release(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, m := range s.queue {
		if slices.Contains(ids, m.id) {
			m.visibleAt = now
		}
	}
}

// Len is the number of messages queued, visible or not.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}
