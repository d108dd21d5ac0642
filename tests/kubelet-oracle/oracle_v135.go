//go:build oracle_v135

package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm"
)

// v1.35: Memory QoS without a reservation policy (every pod with a request gets
// memory.min), no pod-level memory.high.
func podConfig(pod *v1.Pod, memoryQoS bool, _ string, _ *float64) *cm.ResourceConfig {
	return cm.ResourceConfigForPod(pod, true, 100000, memoryQoS)
}
