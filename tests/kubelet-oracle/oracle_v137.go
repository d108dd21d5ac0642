//go:build oracle_v137

package main

import (
	v1 "k8s.io/api/core/v1"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/cm"
)

// v1.37 and later: the reservation policy, and the pod-level memory.high that the pod
// container manager applies with Memory QoS when the kubelet has a factor
// (applyPodLevelMemoryHigh).
func podConfig(pod *v1.Pod, memoryQoS bool, policy string, factor *float64) *cm.ResourceConfig {
	rc := cm.ResourceConfigForPod(pod, true, 100000, memoryQoS, kubeletconfig.MemoryReservationPolicy(policy))
	if memoryQoS && factor != nil {
		cm.ApplyPodLevelMemoryHigh(pod, rc, *factor)
	}
	return rc
}
