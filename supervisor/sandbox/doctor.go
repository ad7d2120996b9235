package sandbox

// Finding is one line of `cyberos doctor`: a control, whether this kernel
// and build can enforce it, and the detail that says why.
type Finding struct {
	Control string `json:"control"`
	OK      bool   `json:"ok"`
	Detail  string `json:"detail"`
}
