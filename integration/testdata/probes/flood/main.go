// Command flood costs the broker as much as it can, bounded by counts so it
// takes as long as the machine needs: "denied" sends Calls tool.calls of a
// tool the skill may not use over Conns connections; "connect" opens Conns
// connections at once, drops them, then opens and drops connections Calls
// times (half of them mid-frame); "garbage" writes an HTTP request, then a 2 MiB frame, then a
// normal call. Output: one JSON object of counts.
package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type args struct {
	Mode  string `json:"mode"`
	Calls int    `json:"calls"`
	Conns int    `json:"conns"`
}

func sock() string { return os.Getenv("CYBEROS_BROKER_SOCKET") }

func send(c net.Conn, body []byte) error {
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(body)))
	_, err := c.Write(append(h[:], body...))
	return err
}

func recv(c net.Conn) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > 32<<20 {
		return nil, fmt.Errorf("response of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	return b, err
}

func main() {
	var a args
	if err := json.NewDecoder(os.Stdin).Decode(&a); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if a.Conns <= 0 {
		a.Conns = 8
	}
	out := map[string]any{}
	switch a.Mode {
	case "denied":
		denied(a, out)
	case "connect":
		connect(a, out)
	case "garbage":
		garbage(out)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", a.Mode)
		os.Exit(2)
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

func denied(a args, out map[string]any) {
	var sent, answered, deniedN, other, dialErr atomic.Int64
	var mu sync.Mutex
	reasons := map[string]int{}
	var wg sync.WaitGroup
	per := a.Calls / a.Conns
	for w := 0; w < a.Conns; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c, err := net.Dial("unix", sock())
			if err != nil {
				dialErr.Add(1)
				return
			}
			defer c.Close()
			for i := 0; i < per; i++ {
				body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tool.call","params":{"tool":"Bash","args":{"command":"id","n":%d}}}`, i, w*per+i)
				if send(c, []byte(body)) != nil {
					return
				}
				sent.Add(1)
				r, err := recv(c)
				if err != nil {
					return
				}
				answered.Add(1)
				var resp struct {
					Error *struct {
						Data struct {
							Reason string `json:"reason"`
						} `json:"data"`
					} `json:"error"`
				}
				json.Unmarshal(r, &resp)
				if resp.Error == nil {
					other.Add(1)
					continue
				}
				if resp.Error.Data.Reason == "tool_not_in_allowed_tools" {
					deniedN.Add(1)
				}
				mu.Lock()
				reasons[resp.Error.Data.Reason]++
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	out["sent"], out["answered"], out["denied"], out["other"], out["dial_errors"] = sent.Load(), answered.Load(), deniedN.Load(), other.Load(), dialErr.Load()
	out["reasons"] = reasons
}

func connect(a args, out map[string]any) {
	// Conns connections at once (over the cap), each making a call.
	var held []net.Conn
	for i := 0; i < a.Conns; i++ {
		c, err := net.Dial("unix", sock())
		if err != nil {
			break
		}
		held = append(held, c)
	}
	served := 0
	for _, c := range held {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if send(c, []byte(`{"jsonrpc":"2.0","id":1,"method":"tool.list"}`)) == nil {
			if _, err := recv(c); err == nil {
				served++
			}
		}
		c.Close()
	}
	var ok, fail int
	for i := 0; i < a.Calls; i++ {
		// A full listen backlog refuses the dial (EAGAIN): try again, so
		// the loop goes as fast as the broker accepts.
		c, err := net.Dial("unix", sock())
		for try := 0; err != nil && try < 5000; try++ {
			fail++
			time.Sleep(time.Millisecond)
			c, err = net.Dial("unix", sock())
		}
		if err != nil {
			continue
		}
		ok++
		if i%2 == 1 {
			c.Write([]byte{0, 0}) // half a length prefix, then gone
		}
		c.Close()
	}
	out["held"], out["served"], out["dialled"], out["dial_errors"] = len(held), served, ok, fail
}

func garbage(out map[string]any) {
	c, err := net.Dial("unix", sock())
	if err != nil {
		out["dial"] = err.Error()
		return
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	c.Write([]byte("GET /info HTTP/1.0\r\n\r\n"))
	r, err := recv(c)
	out["http_response"], out["http_err"] = string(r), errString(err)
	c.Close()

	// The same abuse again: counted, not a second row.
	c, err = net.Dial("unix", sock())
	if err == nil {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		c.Write([]byte("GET /info HTTP/1.0\r\n\r\n"))
		recv(c)
		c.Close()
	}

	// An oversized frame, then a normal call on the same connection.
	c, err = net.Dial("unix", sock())
	if err != nil {
		out["dial2"] = err.Error()
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	send(c, []byte(`{"jsonrpc":"2.0","id":1,"method":"tool.list","params":{"x":"`+strings.Repeat("a", 2<<20)+`"}}`))
	r, err = recv(c)
	out["big_response"], out["big_err"] = string(r), errString(err)
	send(c, []byte(`{"jsonrpc":"2.0","id":2,"method":"tool.list"}`))
	r, err = recv(c)
	out["list_ok"] = err == nil && strings.Contains(string(r), `"tools"`)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
