//go:build oracle_v136

package main

import (
	v1 "k8s.io/api/core/v1"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/cm"
)

// v1.36: the reservation policy, no pod-level memory.high.
func podConfig(pod *v1.Pod, memoryQoS bool, policy string, _ *float64) *cm.ResourceConfig {
	return cm.ResourceConfigForPod(pod, true, 100000, memoryQoS, kubeletconfig.MemoryReservationPolicy(policy))
}
