// Command callbench makes tool calls back to back over one broker
// connection for a fixed time and reports calls/s, p50 and p99. Args:
// {"tool": "...", "args": {...}, "seconds": N}.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/cyberos/supervisor/skillclient"
)

func main() {
	var in struct {
		Tool    string          `json:"tool"`
		Args    json.RawMessage `json:"args"`
		Seconds float64         `json:"seconds"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c, err := skillclient.Dial("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := context.Background()
	var lat []time.Duration
	end := time.Now().Add(time.Duration(in.Seconds * float64(time.Second)))
	start := time.Now()
	for time.Now().Before(end) {
		t0 := time.Now()
		var out json.RawMessage
		if err := c.Call(ctx, in.Tool, in.Args, &out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		lat = append(lat, time.Since(t0))
	}
	total := time.Since(start)
	slices.Sort(lat)
	json.NewEncoder(os.Stdout).Encode(map[string]float64{
		"calls":       float64(len(lat)),
		"calls_per_s": float64(len(lat)) / total.Seconds(),
		"p50_us":      float64(lat[len(lat)/2].Microseconds()),
		"p99_us":      float64(lat[len(lat)*99/100].Microseconds()),
	})
}
