// Command rawbroker abuses the broker protocol from inside a sandbox and
// reports what came back: oversized frames, a 0xFFFFFFFF length prefix,
// invalid JSON, a half-sent frame, a batch of 1000, JSON nested 100 000
// deep. After each abuse it makes a normal tool.list call on a connection
// to show the broker still serves. Output: one JSON object.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

func dial() net.Conn {
	c, err := net.Dial("unix", os.Getenv("CYBEROS_BROKER_SOCKET"))
	if err != nil {
		panic(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

func send(c net.Conn, body []byte) error {
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(body)))
	_, err := c.Write(append(h[:], body...))
	return err
}

func recv(c net.Conn) (json.RawMessage, error) {
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(h[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, err
	}
	return b, nil
}

const list = `{"jsonrpc":"2.0","id":"after","method":"tool.list"}`

// sameConnOK: a normal call on conn c after the abuse.
func sameConnOK(c net.Conn) bool {
	if send(c, []byte(list)) != nil {
		return false
	}
	r, err := recv(c)
	return err == nil && bytes.Contains(r, []byte(`"tools"`))
}

func freshConnOK() bool {
	c := dial()
	defer c.Close()
	return sameConnOK(c)
}

func main() {
	out := map[string]any{}

	// 2 MiB request: request_too_large, same connection keeps working.
	c := dial()
	big := `{"jsonrpc":"2.0","id":1,"method":"tool.call","params":{"tool":"MemoryRead","args":{"path":"` + strings.Repeat("a", 2<<20) + `"}}}`
	send(c, []byte(big))
	r, err := recv(c)
	out["big_response"] = string(r)
	out["big_err"] = errString(err)
	out["big_same_conn_ok"] = sameConnOK(c)
	c.Close()

	// 0xFFFFFFFF length prefix, then nothing.
	c = dial()
	c.Write([]byte{0xff, 0xff, 0xff, 0xff})
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	r, _ = recv(c)
	out["huge_prefix_response"] = string(r)
	c.Close()
	out["after_huge_prefix_ok"] = freshConnOK()

	// Invalid JSON.
	c = dial()
	send(c, []byte(`{"jsonrpc":"2.0",`))
	r, _ = recv(c)
	out["invalid_json_response"] = string(r)
	out["invalid_json_same_conn_ok"] = sameConnOK(c)
	c.Close()

	// Half-sent frame: a length of 100 and 10 bytes, then silence.
	half := dial()
	half.Write([]byte{0, 0, 0, 100})
	half.Write([]byte(`{"jsonrpc"`))
	out["during_half_frame_ok"] = freshConnOK()

	// Batch of 1000.
	c = dial()
	var batch []string
	for range 1000 {
		batch = append(batch, `{"jsonrpc":"2.0","id":1,"method":"tool.list"}`)
	}
	send(c, []byte("["+strings.Join(batch, ",")+"]"))
	r, err = recv(c)
	out["batch_response_prefix"] = prefix(r)
	out["batch_err"] = errString(err)
	out["batch_same_conn_ok"] = sameConnOK(c)
	c.Close()

	// JSON nested 100 000 deep.
	c = dial()
	deep := `{"jsonrpc":"2.0","id":1,"method":"tool.call","params":{"tool":"MemoryRead","args":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}}`
	send(c, []byte(deep))
	r, err = recv(c)
	out["deep_response"] = prefix(r)
	out["deep_err"] = errString(err)
	out["deep_same_conn_ok"] = sameConnOK(c)
	c.Close()

	half.Close()
	out["final_ok"] = freshConnOK()
	json.NewEncoder(os.Stdout).Encode(out)
}

func prefix(b []byte) string {
	if len(b) > 300 {
		b = b[:300]
	}
	return string(b)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
