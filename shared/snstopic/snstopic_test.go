package snstopic

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/fakes"
)

// A FIFO topic refuses a message without a group or a de-duplication id
// before anything is sent; a standard topic sends neither, and leaves out
// empty attributes (SNS rejects them).
func TestPublish(t *testing.T) {
	client, got := fakes.NewSNS(t, http.StatusOK, fakes.SNSPublishOK)
	fifo, err := New("test", client, "arn:aws:sns:us-east-1:123456789012:t.fifo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []Message{{Body: []byte("{}"), Dedup: "d"}, {Body: []byte("{}"), Group: "g"}} {
		if err := fifo.Publish(context.Background(), m); err == nil {
			t.Errorf("fifo Publish(%+v) succeeded, want an error", m)
		}
	}
	if len(got) != 0 {
		t.Fatal("a refused message was sent")
	}
	std, err := New("test", client, "arn:aws:sns:us-east-1:123456789012:t")
	if err != nil {
		t.Fatal(err)
	}
	if err := std.Publish(context.Background(), Message{Body: []byte(`{"a":1}`),
		Attributes: map[string]string{"type": "x", "empty": ""}, Group: "g", Dedup: "d"}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Form.Get("Message") != `{"a":1}` || r.Form["MessageGroupId"] != nil || r.Form["MessageDeduplicationId"] != nil {
		t.Errorf("form %v", r.Form)
	}
	if diff := cmp.Diff(map[string][2]string{"type": {"String", "x"}}, r.Attributes()); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
}
