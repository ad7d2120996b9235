// Command cyberos is the skill supervisor's CLI and daemon; its commands are
// in package cli.
package main

import "cyberos.dev/supervisor/cli"

func main() { cli.Main() }
