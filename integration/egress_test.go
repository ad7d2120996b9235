//go:build linux

package integration

// Issue 16, finding 2: the broker's Http tools run on the host, outside the
// sandbox, so they must not reach the host's own addresses (nor, through a
// redirect, be steered there), whatever x-allowed-domains says.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Addresses the test puts on this host. docAddr is in a documentation range
// (like the 192.0.2.2 the finding reached); globalAddr is in a globally
// reachable block (AS112-v4, 192.31.196.0/24), so only the host-address
// check can refuse it; anyIPAddr lies in a local route added without an
// interface address (AnyIP), so only the kernel's route lookup can.
const (
	egressDocAddr    = "198.51.100.7"
	egressGlobalAddr = "192.31.196.7"
	egressAnyIPNet   = "192.31.196.128/25"
	egressAnyIPAddr  = "192.31.196.130"
)

// hostAddrs puts each address on a dummy link the test creates, or on lo
// when the kernel cannot make one (a minimal guest), and removes them at the
// end of the test.
func hostAddrs(t *testing.T, addrs ...string) {
	t.Helper()
	name := fmt.Sprintf("cyeg%d", os.Getpid()%100000)
	link := netlink.Link(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}})
	if err := netlink.LinkAdd(link); err == nil {
		t.Cleanup(func() {
			if err := netlink.LinkDel(link); err != nil {
				t.Errorf("remove link %s: %v", name, err)
			}
		})
		if link, err = netlink.LinkByName(name); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Logf("no dummy link (%v): the addresses go on lo", err)
		if link, err = netlink.LinkByName("lo"); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range addrs {
		addr, err := netlink.ParseAddr(a + "/32")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.AddrAdd(link, addr); err != nil {
			t.Fatalf("add %s to %s: %v", a, link.Attrs().Name, err)
		}
		t.Cleanup(func() { _ = netlink.AddrDel(link, addr) }) // gone with the dummy link anyway
	}
}

// anyIPRoute adds a local route for prefix on lo: every address in it is the
// host's, though no interface carries it.
func anyIPRoute(t *testing.T, prefix string) {
	t.Helper()
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	_, dst, err := net.ParseCIDR(prefix)
	if err != nil {
		t.Fatal(err)
	}
	r := &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: dst, Type: unix.RTN_LOCAL, Table: unix.RT_TABLE_LOCAL, Scope: netlink.SCOPE_HOST}
	if err := netlink.RouteAdd(r); err != nil {
		t.Fatalf("add local route %s: %v", prefix, err)
	}
	t.Cleanup(func() {
		if err := netlink.RouteDel(r); err != nil {
			t.Errorf("remove local route %s: %v", prefix, err)
		}
	})
}

// countingServer listens on addr:0 and counts the requests it sees.
func countingServer(t *testing.T, addr string) (port string, hits *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	hits = new(atomic.Int64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "host service")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, hits
}

// TestHttpFetchCannotReachHost: a skill allowed the host's own addresses (a
// documentation one, a globally reachable one, one only a local route
// makes the host's) gets domain_violation for each, directly and through a
// redirect from an allowed loopback server, and the host's listeners see
// nothing. The runs allow loopback (--allow-loopback-http, as the broker
// tests do): that test switch must not open the host's other addresses.
func TestHttpFetchCannotReachHost(t *testing.T) {
	e := newEnv(t)
	hostAddrs(t, egressDocAddr, egressGlobalAddr)
	anyIPRoute(t, egressAnyIPNet)

	// Each address is refused by its own layer, named in the denial: the
	// special-purpose tables, the host's interface addresses, the route.
	type target struct{ name, addr, class, port string }
	var targets []target
	var hits []*atomic.Int64
	for _, a := range []target{
		{name: "doc", addr: egressDocAddr, class: "(documentation)"},
		{name: "global", addr: egressGlobalAddr, class: "(host address)"},
		{name: "anyip", addr: egressAnyIPAddr, class: "(routed to the host)"},
	} {
		port, h := countingServer(t, a.addr)
		a.port = port
		targets = append(targets, a)
		hits = append(hits, h)
	}
	// The loopback server the skill may reach redirects to the host's
	// addresses.
	var loHits atomic.Int64
	lo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	loSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		loHits.Add(1)
		if to := r.URL.Query().Get("to"); to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		fmt.Fprint(w, "ok")
	})}
	go loSrv.Serve(lo)
	defer loSrv.Close()
	_, loPort, _ := net.SplitHostPort(lo.Addr().String())

	domains := []string{`"127.0.0.1"`}
	var cs [][3]string
	for _, tg := range targets {
		domains = append(domains, `"`+tg.addr+`"`)
		u := "http://" + tg.addr + ":" + tg.port + "/"
		cs = append(cs,
			[3]string{"fetch-" + tg.name, "HttpFetch", fmt.Sprintf(`{"url":"%s"}`, u)},
			[3]string{"post-" + tg.name, "HttpPost", fmt.Sprintf(`{"url":"%s","body":"x"}`, u)},
			[3]string{"redirect-" + tg.name, "HttpFetch", fmt.Sprintf(`{"url":"http://127.0.0.1:%s/r?to=%s"}`, loPort, url.QueryEscape(u))})
	}
	// The loopback server itself stays reachable: the refusals above are
	// about the host's addresses, not a broken switch.
	cs = append(cs, [3]string{"loopback", "HttpFetch", fmt.Sprintf(`{"url":"http://127.0.0.1:%s/"}`, loPort)})
	fm := "allowed_tools: [HttpFetch, HttpPost]\nx-allowed-domains: [" + strings.Join(domains, ", ") + "]\n"
	r := e.run(e.skill("egress", fm, callScript(cs...)), "--allow-loopback-http")
	m := calls(t, r)
	var env struct {
		Containment struct{ Egress string } `json:"containment"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &env); err != nil || env.Containment.Egress != "address filter" {
		t.Errorf("containment.egress = %q (%v), want \"address filter\"", env.Containment.Egress, err)
	}
	for _, c := range cs[:len(cs)-1] {
		mustRefuse(t, m, c[0], "domain_violation")
	}
	mustOK(t, m, "loopback")
	var details map[string]struct {
		Err *struct {
			Data struct{ Detail string } `json:"data"`
		} `json:"err"`
	}
	if err := json.Unmarshal(r.env.Result, &details); err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		for _, c := range []string{"fetch-", "post-", "redirect-"} {
			if e := details[c+tg.name].Err; e != nil && !strings.Contains(e.Data.Detail, tg.class) {
				t.Errorf("%s%s: refused with %q, want the class %s", c, tg.name, e.Data.Detail, tg.class)
			}
		}
	}
	for i, tg := range targets {
		if n := hits[i].Load(); n != 0 {
			t.Errorf("%s (%s): the host's listener saw %d requests", tg.name, tg.addr, n)
		}
	}
	if n := loHits.Load(); n != int64(len(targets))+1 {
		t.Errorf("the loopback server saw %d requests, want %d (each redirect and the plain fetch)", n, len(targets)+1)
	}
}

// TestEgressDoctor: `cyberos doctor` says which egress control is in force,
// and that it can read what it needs on this host.
func TestEgressDoctor(t *testing.T) {
	f, ok := doctor(t)["egress"]
	if !ok {
		t.Fatal("doctor has no egress finding")
	}
	if want := "address filter (host addresses and IANA special-purpose ranges refused at each dial)"; !f.OK || f.Detail != want {
		t.Errorf("doctor egress: ok=%v %q, want ok %q", f.OK, f.Detail, want)
	}
}
