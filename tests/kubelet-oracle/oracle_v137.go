//go:build oracle_v137

package main

import (
	"context"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletdefaults "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/kuberuntime"
	"k8s.io/kubernetes/pkg/kubelet/logs"
	proberesults "k8s.io/kubernetes/pkg/kubelet/prober/results"
)

// v1.37: the reservation policy, and the pod-level memory.high that the pod container
// manager applies with Memory QoS when the kubelet has a factor
// (applyPodLevelMemoryHigh).
func podConfig(pod *v1.Pod, memoryQoS bool, policy string, factor *float64) *cm.ResourceConfig {
	rc := cm.ResourceConfigForPod(pod, true, 100000, memoryQoS, kubeletconfig.MemoryReservationPolicy(policy))
	if memoryQoS && factor != nil {
		cm.ApplyPodLevelMemoryHigh(pod, rc, *factor)
	}
	return rc
}

// kubeletDefaults: the factor and policy of a kubelet configuration that names these
// (nil, "": not named), after the kubelet's own defaulting; from v1.37 a factor left
// out stays out.
func kubeletDefaults(factor *float64, policy string) (*float64, string) {
	c := &kubeletconfigv1beta1.KubeletConfiguration{MemoryReservationPolicy: kubeletconfigv1beta1.MemoryReservationPolicy(policy)}
	if factor != nil {
		f := *factor
		c.MemoryThrottlingFactor = &f
	}
	kubeletdefaults.SetDefaults_KubeletConfiguration(c)
	return c.MemoryThrottlingFactor, string(c.MemoryReservationPolicy)
}

func qosNodeConfig(policy string) cm.NodeConfig {
	return cm.NodeConfig{CgroupsPerQOS: true, MemoryReservationPolicy: kubeletconfig.MemoryReservationPolicy(policy)}
}

// machine: the node's memory capacity as cadvisor reports it (the OOM score's base),
// node allocatable's here.
func machine() *cadvisorapi.MachineInfo {
	return &cadvisorapi.MachineInfo{MemoryCapacity: uint64(allocatable.Memory().Value())}
}

// newRuntime: the kubelet's runtime manager by its own constructor.
func newRuntime(ctx context.Context, root string, factor *float64, policy string) (any, error) {
	c := newCollaborators()
	rt, _, err := kuberuntime.NewKubeGenericRuntimeManager(ctx, c.recorder,
		proberesults.NewManager(), proberesults.NewManager(), proberesults.NewManager(),
		root, root, machine(), podStates{}, 110, c.os, c.helper, c.http, c.backoff,
		false, nil, 5, 10, string(kubeletconfig.NeverVerifyPreloadedImages), nil, "", "",
		nil, true, c.cfsPeriod, nil, c.runtime, c.images,
		cm.NewFakeContainerManager(klog.Background()), logs.NewStubContainerLogManager(), nil,
		false, "", nodeAllocatable, factor, kubeletconfig.MemoryReservationPolicy(policy),
		pullTimes{}, noop.NewTracerProvider(), nil, nil, initTimes{})
	return rt, err
}
