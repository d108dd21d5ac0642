//go:build oracle_v136

package main

import (
	"context"

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletdefaults "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/kuberuntime"
	"k8s.io/kubernetes/pkg/kubelet/logs"
	proberesults "k8s.io/kubernetes/pkg/kubelet/prober/results"
)

// v1.36: the reservation policy, no pod-level memory.high.
func podConfig(pod *v1.Pod, memoryQoS bool, policy string, _ *float64) *cm.ResourceConfig {
	return cm.ResourceConfigForPod(pod, true, 100000, memoryQoS, kubeletconfig.MemoryReservationPolicy(policy))
}

// kubeletDefaults: the factor and policy of a kubelet configuration that names these
// (nil, "": not named), after the kubelet's own defaulting: a factor left out is 0.9.
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

// newRuntime: the kubelet's runtime manager by its own constructor (the factor is a
// number: the defaulted configuration always has one).
func newRuntime(ctx context.Context, root string, factor *float64, policy string) (any, error) {
	c := newCollaborators()
	rt, _, err := kuberuntime.NewKubeGenericRuntimeManager(ctx, c.recorder,
		proberesults.NewManager(), proberesults.NewManager(), proberesults.NewManager(),
		root, root, machine(), podStates{}, 110, c.os, c.helper, c.http, c.backoff,
		false, nil, 5, 10, string(kubeletconfig.NeverVerifyPreloadedImages), nil, "", "",
		nil, true, c.cfsPeriod, c.runtime, c.images,
		cm.NewFakeContainerManager(), logs.NewStubContainerLogManager(), nil,
		false, "", nodeAllocatable, *factor, kubeletconfig.MemoryReservationPolicy(policy),
		pullTimes{}, noop.NewTracerProvider(), nil, nil, initTimes{})
	return rt, err
}
