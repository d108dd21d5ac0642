// Lets containers.go and cgroupv2.go refer to the kubelet's symbols (go:linkname) by
// declarations without a body.
