//go:build linux

// Command cyberos-spawn is the sandbox creation helper that cyberos starts
// beside each runner (package spawn), and, re-executed by libcontainer, the
// first process of every sandbox. It links little more than libcontainer,
// so that each such re-execution starts a small binary.
package main

import "cyberos.dev/supervisor/spawn"

func main() { spawn.Main() }
