//go:build !linux

package mcpclient

import (
	"errors"
	"net"
	"os"
)

// listenInNetNS needs Linux network namespaces.
func listenInNetNS(*os.File, string) (net.Listener, error) {
	return nil, errors.New("an MCP server's egress proxy needs Linux network namespaces")
}
