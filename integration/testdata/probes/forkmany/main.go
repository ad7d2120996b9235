// Command forkmany tries to start 200 long-lived children and reports how
// many started; under pids.max most must fail.
package main

import (
	"encoding/json"
	"os"
	"os/exec"
)

func main() {
	started := 0
	var cmds []*exec.Cmd
	for i := 0; i < 200; i++ {
		c := exec.Command("/bin/sleep", "30")
		if err := c.Start(); err != nil {
			continue
		}
		started++
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		c.Process.Kill()
		c.Wait()
	}
	json.NewEncoder(os.Stdout).Encode(map[string]int{"started": started})
}
