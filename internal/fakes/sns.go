package fakes

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
)

// SNS speaks the awsquery protocol: a form-encoded POST with Action=Publish,
// answered in XML (see the SDK's request_snapshot/Publish.request.snap).
// These are its answers to Publish.
const (
	SNSPublishOK = `<PublishResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
<PublishResult><MessageId>94f20ce6-13c5-43a0-9a9e-ca52d816e90b</MessageId></PublishResult>
<ResponseMetadata><RequestId>f187a3c1-376f-11df-8963-01868b7c937a</RequestId></ResponseMetadata>
</PublishResponse>`
	SNSPublishNotFound = `<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
<Error><Type>Sender</Type><Code>NotFound</Code><Message>Topic does not exist</Message></Error>
<RequestId>9dd01905-5012-5f99-8663-4b3ecd0dfaef</RequestId>
</ErrorResponse>`
	SNSPublishInternal = `<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
<Error><Type>Receiver</Type><Code>InternalError</Code><Message>Internal error</Message></Error>
<RequestId>9dd01905-5012-5f99-8663-4b3ecd0dfaf0</RequestId>
</ErrorResponse>`
)

// SNSRequest is a Publish call as the fake decoded it.
type SNSRequest struct {
	Form          url.Values
	Authorization string
}

// NewSNS starts an SNS endpoint answering every call with status and body,
// and returns a real *sns.Client (no retries) that talks to it and the
// calls it received.
func NewSNS(t testing.TB, status int, body string) (*sns.Client, <-chan SNSRequest) {
	t.Helper()
	got := make(chan SNSRequest, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
			http.Error(w, "unexpected content type "+ct, http.StatusBadRequest)
			return
		}
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- SNSRequest{Form: r.PostForm, Authorization: r.Header.Get("Authorization")}
		w.Header().Set("Content-Type", "text/xml")
		w.Header().Set("X-Amzn-Requestid", "f187a3c1-376f-11df-8963-01868b7c937a")
		w.WriteHeader(status)
		_, _ = fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	client := sns.New(sns.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", ""),
		Retryer:      aws.NopRetryer{},
		HTTPClient:   srv.Client(),
	})
	return client, got
}

// Attributes decodes a Publish call's
// MessageAttributes.entry.N.{Name,Value.DataType,Value.StringValue} into
// name -> {data type, value}.
func (r SNSRequest) Attributes() map[string][2]string {
	attrs := map[string][2]string{}
	for i := 1; ; i++ {
		p := fmt.Sprintf("MessageAttributes.entry.%d.", i)
		name := r.Form.Get(p + "Name")
		if name == "" {
			return attrs
		}
		attrs[name] = [2]string{r.Form.Get(p + "Value.DataType"), r.Form.Get(p + "Value.StringValue")}
	}
}
