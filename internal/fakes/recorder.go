package fakes

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Request is what a Recorder saw of one request.
type Request struct {
	Method string
	Header http.Header
	Body   []byte
}

// NewRecorder starts a server that reports every request on the returned
// channel (buffered for 16) and then answers it with handler.
func NewRecorder(t testing.TB, handler http.HandlerFunc) (*httptest.Server, <-chan Request) {
	t.Helper()
	got := make(chan Request, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- Request{Method: r.Method, Header: r.Header.Clone(), Body: body}
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}
