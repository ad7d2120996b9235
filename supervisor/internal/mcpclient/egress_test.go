package mcpclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// The egress proxy on its own (the sandboxed test puts it in a server's
// network namespace): an allowed name is reached by GET and by CONNECT; a
// name outside the domains, one resolving to a refused address, a relative
// request and a CONNECT without a port are refused with 403 and logged,
// and the backend never sees them.
func TestEgressProxy(t *testing.T) {
	var hits atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "hello %s, proxy auth %q", r.Host, r.Header.Get("Proxy-Authorization"))
	}))
	defer backend.Close()
	_, port, _ := net.SplitHostPort(backend.Listener.Addr().String())
	names := map[string]string{"ok.test": "127.0.0.1", "other.test": "127.0.0.1", "meta.ok.test": "169.254.169.254"}
	var logs syncBuf
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e := &Egress{Domains: []string{"ok.test", "*.ok.test"}, AllowLoopback: true, Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: m,
		Resolve: func(_ context.Context, h string) ([]netip.Addr, error) {
			if a, ok := names[h]; ok {
				return []netip.Addr{netip.MustParseAddr(a)}, nil
			}
			return nil, fmt.Errorf("no host %s", h)
		}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := e.serve("unit", ln)
	defer p.Close()
	proxyURL, _ := url.Parse("http://" + ln.Addr().String())
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL),
		ProxyConnectHeader: http.Header{"Proxy-Authorization": {"Basic leak"}}}}
	get := func(u string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Proxy-Authorization", "Basic leak")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://ok.test:" + port + "/x"); code != 200 || body != `hello ok.test:`+port+`, proxy auth ""` {
		t.Errorf("allowed GET: %d %q", code, body)
	}
	// CONNECT, then plain HTTP inside the tunnel.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT ok.test:%s HTTP/1.1\r\nHost: ok.test:%s\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n") // kept alive: the tunnel stays open
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Errorf("through the tunnel: %v %v", resp, err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	before := hits.Load()
	for _, u := range []string{"http://other.test:" + port + "/", "http://meta.ok.test/latest/", "http://127.0.0.1:" + port + "/"} {
		if code, body := get(u); code != http.StatusForbidden || !strings.Contains(body, "domain_violation") {
			t.Errorf("%s: %d %q", u, code, body)
		}
	}
	for _, raw := range []string{"CONNECT other.test:" + port + " HTTP/1.1\r\nHost: other.test:" + port + "\r\n\r\n",
		"CONNECT ok.test HTTP/1.1\r\nHost: ok.test\r\n\r\n", "GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n"} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("%q: %v %v", raw, resp, err)
		}
	}
	if n := hits.Load() - before; n != 0 {
		t.Errorf("refused requests reached the backend %d times", n)
	}
	for _, want := range []string{`host=other.test reason=domain_violation`, `host=meta.ok.test reason=domain_violation detail="host \"meta.ok.test\" resolves to a refused address (metadata)"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if n := promtest.ToFloat64(m.EgressRefused.WithLabelValues("unit", "domain_violation")); n != 6 {
		t.Errorf("cyberos_mcp_egress_refused_total{server=unit,reason=domain_violation} = %v, want 6", n)
	}
	// Closing the proxy ends its tunnels.
	p.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("a tunnel outlived the proxy: %v", err)
	}
}
