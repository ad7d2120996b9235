package integration

import (
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpCollector is an OTLP/HTTP trace receiver on 127.0.0.1 (protobuf).
type otlpCollector struct {
	url string
	mu  sync.Mutex
	got []span
}

type span struct {
	name, traceID, parent string
	attrs                 map[string]string
	resource              map[string]string // its resource's attributes
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &otlpCollector{url: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		c.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			res := map[string]string{}
			for _, a := range rs.GetResource().GetAttributes() {
				res[a.GetKey()] = a.GetValue().GetStringValue()
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					sp := span{name: s.GetName(), traceID: hex.EncodeToString(s.GetTraceId()), parent: hex.EncodeToString(s.GetParentSpanId()), attrs: map[string]string{}, resource: res}
					for _, a := range s.GetAttributes() {
						sp.attrs[a.GetKey()] = a.GetValue().String()
					}
					c.got = append(c.got, sp)
				}
			}
		}
		c.mu.Unlock()
		resp, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(resp)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return c
}

func (c *otlpCollector) spans() []span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]span(nil), c.got...)
}
