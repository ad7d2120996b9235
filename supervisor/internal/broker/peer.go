package broker

// peer is who is at the other end of a connection, as the kernel says.
type peer struct {
	pid int32
	uid uint32
}
