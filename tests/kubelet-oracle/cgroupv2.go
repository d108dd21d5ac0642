package main

import (
	"sync"
	_ "unsafe" // go:linkname

	_ "github.com/opencontainers/cgroups"
)

// The kubelet asks runc's cgroups library whether the node is on cgroup v2
// (IsCgroup2UnifiedMode: a statfs of /sys/fs/cgroup, once). The oracle answers for a
// cgroup v2 node, as its own tests do by mocking the kubelet's variable, here by
// settling the library's answer before anything asks.

//go:linkname isUnifiedOnce github.com/opencontainers/cgroups.isUnifiedOnce
var isUnifiedOnce sync.Once

//go:linkname isUnified github.com/opencontainers/cgroups.isUnified
var isUnified bool

func assumeCgroupV2() {
	isUnifiedOnce.Do(func() { isUnified = true })
}
