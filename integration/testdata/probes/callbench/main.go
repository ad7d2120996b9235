// Command callbench makes tool calls back to back over broker connections
// for a fixed time and reports calls/s, p50 and p99. Args:
// {"tool": "...", "args": {...}, "seconds": N, "callers": C}: C callers
// (default 1), each on its own connection, calling at once.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"cyberos.dev/skillclient"
)

func main() {
	var in struct {
		Tool    string          `json:"tool"`
		Args    json.RawMessage `json:"args"`
		Seconds float64         `json:"seconds"`
		Callers int             `json:"callers"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	in.Callers = max(in.Callers, 1)
	clients := make([]*skillclient.Client, in.Callers)
	for i := range clients {
		c, err := skillclient.Dial("")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		clients[i] = c
	}
	ctx := context.Background()
	lats := make([][]time.Duration, in.Callers)
	start := time.Now()
	end := start.Add(time.Duration(in.Seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				t0 := time.Now()
				var out json.RawMessage
				if err := c.Call(ctx, in.Tool, in.Args, &out); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	total := time.Since(start)
	lat := slices.Concat(lats...)
	slices.Sort(lat)
	json.NewEncoder(os.Stdout).Encode(map[string]float64{
		"calls":       float64(len(lat)),
		"calls_per_s": float64(len(lat)) / total.Seconds(),
		"p50_us":      float64(lat[len(lat)/2].Microseconds()),
		"p99_us":      float64(lat[len(lat)*99/100].Microseconds()),
	})
}
