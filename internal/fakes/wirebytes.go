package fakes

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
)

// WireBytes counts the bytes a server's connections carried, both ways:
// what a call costs on a metered path (a NAT gateway, a VPC endpoint),
// headers included, TLS's few percent not.
type WireBytes struct{ n atomic.Int64 }

// Total is the bytes read and written so far.
func (w *WireBytes) Total() int64 { return w.n.Load() }

// Serve starts h on a loopback httptest server whose connections w counts.
func (w *WireBytes) Serve(h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = countingListener{Listener: srv.Listener, n: &w.n}
	srv.Start()
	return srv
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, n: l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}
