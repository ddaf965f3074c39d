package fakes_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/internal/fakes"
)

// TestWireBytesCountsBothWays: a request's and its answer's bytes, headers
// included, are all counted.
func TestWireBytesCountsBothWays(t *testing.T) {
	var w fakes.WireBytes
	srv := w.Serve(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(rw, strings.Repeat("b", 1000))
	}))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader(strings.Repeat("a", 2000)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	srv.Close() // every byte read and written before Total
	if got := w.Total(); got < 3000 || got > 3600 {
		t.Errorf("Total = %d, want the 3,000 bytes of the bodies and a few hundred of headers", got)
	}
}
