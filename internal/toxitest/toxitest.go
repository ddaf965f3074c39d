// Package toxitest runs Shopify's toxiproxy inside the test process: TCP
// proxies on loopback between the system under test and what it talks to (a
// spawned redis-server, a fake provider's httptest server), and toxics on
// them that make the network misbehave the ways production networks do:
// latency past a client's timeout, a connection cut in the middle of a reply
// (the command applied, its answer lost), a peer that stops answering
// altogether.
//
// It drives toxiproxy through its Go API (ApiServer, Proxy,
// ToxicCollection) rather than its HTTP API: ApiServer.Listen can be neither
// stopped nor told apart from a failed bind (it exits the process), and the
// test owns the proxies anyway. Every toxic added is logged with when it was
// on, so a fault run can print what it did.
package toxitest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Directions a toxic acts on.
const (
	// Upstream is what the client sends (requests, commands).
	Upstream = "upstream"
	// Downstream is what the server sends back (answers, replies).
	Downstream = "downstream"
)

// removeTimeout bounds the removal of a toxic: toxiproxy waits for each link
// to pass on what it holds, and a stuck link must fail the test, not hang it.
const removeTimeout = 30 * time.Second

// Server is an in-process toxiproxy: a set of proxies and the log of the
// toxics put on them.
type Server struct {
	t     testing.TB
	api   *toxiproxy.ApiServer
	began time.Time

	mu      sync.Mutex
	proxies []*Proxy
	log     []*Applied
}

// Start returns a toxiproxy whose proxies all stop with the test.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, api: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()), began: time.Now()}
	t.Cleanup(func() {
		s.mu.Lock()
		ps := s.proxies
		s.mu.Unlock()
		for _, p := range ps {
			p.p.Stop()
		}
	})
	return s
}

// Proxy is one TCP proxy: clients connect to Addr, it connects to Upstream.
type Proxy struct {
	// Name names the proxy in the log of toxics.
	Name string
	// Addr is the loopback host:port clients connect to.
	Addr string
	// Upstream is the host:port it forwards to.
	Upstream string

	s *Server
	p *toxiproxy.Proxy
}

// Proxy starts a proxy named name in front of upstream (host:port), on a
// free loopback port.
func (s *Server) Proxy(name, upstream string) *Proxy {
	s.t.Helper()
	// Port 0: the kernel picks a free port at bind time, so no other test
	// can take it between asking and binding; a later Enable binds the same
	// port again (toxiproxy keeps the address it got).
	p := toxiproxy.NewProxy(s.api, name, "127.0.0.1:0", upstream)
	if err := s.api.Collection.Add(p, true); err != nil {
		s.t.Fatalf("toxitest: proxy %s to %s: %v", name, upstream, err)
	}
	px := &Proxy{Name: name, Addr: p.Listen, Upstream: upstream, s: s, p: p}
	s.mu.Lock()
	s.proxies = append(s.proxies, px)
	s.mu.Unlock()
	return px
}

// URL is Addr under scheme: "redis://127.0.0.1:1234", "http://…".
func (p *Proxy) URL(scheme string) string { return scheme + "://" + p.Addr }

// Toxic is one toxic, in toxiproxy's terms (its JSON shape).
type Toxic struct {
	// Name is unique on a proxy; empty means "<type>_<stream>".
	Name string `json:"name,omitempty"`
	Type string `json:"type"`
	// Stream is Upstream or Downstream.
	Stream string `json:"stream"`
	// Toxicity is the chance (0..1] that a connection is affected, drawn
	// when the connection opens or the toxic is added; 0 means 1.
	Toxicity float32 `json:"toxicity,omitempty"`
	// Attributes are the type's settings (milliseconds, bytes).
	Attributes map[string]int64 `json:"attributes,omitempty"`
}

// Latency delays every chunk by latency ± jitter.
func Latency(stream string, latency, jitter time.Duration) Toxic {
	return Toxic{Type: "latency", Stream: stream, Attributes: map[string]int64{
		"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()}}
}

// ResetPeer closes the connection after after once data flows, dropping
// what is in flight (a TCP RST on connections opened while it is on; a plain
// close on those it meets already open).
func ResetPeer(stream string, after time.Duration) Toxic {
	return Toxic{Type: "reset_peer", Stream: stream, Attributes: map[string]int64{"timeout": after.Milliseconds()}}
}

// LimitData closes each connection once n bytes have passed in stream: on
// Downstream, in the middle of whatever reply crosses the mark.
func LimitData(stream string, n int64) Toxic {
	return Toxic{Type: "limit_data", Stream: stream, Attributes: map[string]int64{"bytes": n}}
}

// Timeout drops everything in stream and closes the connection after after.
func Timeout(stream string, after time.Duration) Toxic {
	return Toxic{Type: "timeout", Stream: stream, Attributes: map[string]int64{"timeout": after.Milliseconds()}}
}

// Blackhole drops everything in stream and never closes the connection: a
// peer that went silent. Removing it closes the connections it held.
func Blackhole(stream string) Toxic { return Timeout(stream, 0) }

// Named returns t named name.
func (t Toxic) Named(name string) Toxic { t.Name = name; return t }

// On returns t affecting a share (0..1] of connections.
func (t Toxic) On(share float32) Toxic { t.Toxicity = share; return t }

func (t Toxic) name() string { return cmp.Or(t.Name, t.Type+"_"+t.Stream) }

func (t Toxic) String() string {
	var attrs []string
	for _, k := range []string{"latency", "jitter", "timeout", "bytes"} {
		if v, ok := t.Attributes[k]; ok {
			unit := "ms"
			if k == "bytes" {
				unit = "B"
			}
			attrs = append(attrs, fmt.Sprintf("%s=%d%s", k, v, unit))
		}
	}
	s := t.Type + " " + t.Stream
	if len(attrs) > 0 {
		s += " " + strings.Join(attrs, " ")
	}
	if t.Toxicity > 0 && t.Toxicity < 1 {
		s += fmt.Sprintf(" on %.0f%% of connections", t.Toxicity*100)
	}
	return s
}

// Applied is a toxic as it was on: From and To are offsets from the
// server's start (To is zero while it is still on); Every, if set, is how
// often it was redrawn (Redraw).
type Applied struct {
	Proxy    string
	Toxic    Toxic
	Every    time.Duration
	From, To time.Duration
}

func (a Applied) String() string {
	toxic := a.Toxic.String()
	if a.Every > 0 {
		toxic += fmt.Sprintf(" (redrawn every %s)", a.Every)
	}
	if a.To == 0 {
		return fmt.Sprintf("%s: %s from %s (still on)", a.Proxy, toxic, a.From.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("%s: %s for %s (at %s)", a.Proxy, toxic, (a.To - a.From).Round(100*time.Millisecond),
		a.From.Round(100*time.Millisecond))
}

// Add puts toxic on p, on connections open and to come, until the returned
// function removes it (calling it again does nothing).
func (p *Proxy) Add(toxic Toxic) (remove func()) {
	p.s.t.Helper()
	a := &Applied{Proxy: p.Name, Toxic: toxic, From: time.Since(p.s.began)}
	p.s.mu.Lock()
	p.s.log = append(p.s.log, a)
	p.s.mu.Unlock()
	off := p.add(toxic)
	return func() {
		off()
		p.s.mu.Lock()
		if a.To == 0 {
			a.To = time.Since(p.s.began)
		}
		p.s.mu.Unlock()
	}
}

// add puts toxic on p without logging it.
func (p *Proxy) add(toxic Toxic) (remove func()) {
	p.s.t.Helper()
	raw, err := json.Marshal(toxic)
	if err != nil {
		p.s.t.Fatalf("toxitest: %v", err)
	}
	if _, err := p.p.Toxics.AddToxicJson(bytes.NewReader(raw)); err != nil {
		p.s.t.Fatalf("toxitest: add %s to %s: %v", toxic, p.Name, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			p.s.t.Helper()
			done := make(chan error, 1)
			go func() { done <- p.p.Toxics.RemoveToxic(context.Background(), toxic.name()) }()
			select {
			case err := <-done:
				if err != nil {
					p.s.t.Errorf("toxitest: remove %s from %s: %v", toxic, p.Name, err)
				}
			case <-time.After(removeTimeout):
				p.s.t.Errorf("toxitest: removing %s from %s took over %s", toxic, p.Name, removeTimeout)
			}
		})
	}
}

// For puts toxics on p, waits d (or until ctx is done), and removes them.
func (p *Proxy) For(ctx context.Context, d time.Duration, toxics ...Toxic) {
	p.s.t.Helper()
	removes := make([]func(), 0, len(toxics))
	for _, t := range toxics {
		removes = append(removes, p.Add(t))
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	for _, remove := range removes {
		remove()
	}
}

// Redraw puts toxics on p for d, taking them off and putting them on again
// every interval. A toxicity below 1 is drawn per connection as a toxic
// goes on (or as a connection opens): left on, a toxic picks its victims
// once and a client's pool soon holds only the connections it spared;
// redrawn, it goes on picking some of them.
func (p *Proxy) Redraw(ctx context.Context, d, every time.Duration, toxics ...Toxic) {
	p.s.t.Helper()
	var entries []*Applied
	p.s.mu.Lock()
	for _, t := range toxics {
		a := &Applied{Proxy: p.Name, Toxic: t, Every: every, From: time.Since(p.s.began)}
		entries = append(entries, a)
		p.s.log = append(p.s.log, a)
	}
	p.s.mu.Unlock()
	for end := time.Now().Add(d); time.Now().Before(end) && ctx.Err() == nil; {
		removes := make([]func(), 0, len(toxics))
		for _, t := range toxics {
			removes = append(removes, p.add(t))
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(every, time.Until(end))):
		}
		for _, remove := range removes {
			remove()
		}
	}
	p.s.mu.Lock()
	for _, a := range entries {
		a.To = time.Since(p.s.began)
	}
	p.s.mu.Unlock()
}

// Disable stops p for d: it closes every connection through it and refuses
// new ones (a peer that is down, not silent), then listens again on the
// same address.
func (p *Proxy) Disable(ctx context.Context, d time.Duration) {
	p.s.t.Helper()
	a := &Applied{Proxy: p.Name, Toxic: Toxic{Type: "down", Stream: "both"}, From: time.Since(p.s.began)}
	p.s.mu.Lock()
	p.s.log = append(p.s.log, a)
	p.s.mu.Unlock()
	p.p.Stop()
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	var err error
	for range 50 { // the old listener's port may linger for a moment
		if err = p.p.Start(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.s.t.Fatalf("toxitest: enable %s again on %s: %v", p.Name, p.Addr, err)
	}
	p.s.mu.Lock()
	a.To = time.Since(p.s.began)
	p.s.mu.Unlock()
}

// Applied returns every toxic put on the server's proxies so far, in order.
func (s *Server) Applied() []Applied {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Applied, len(s.log))
	for i, a := range s.log {
		out[i] = *a
	}
	return out
}
