//go:build oracle_v135

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

// v1.35: Memory QoS without a reservation policy (every pod with a request gets
// memory.min), no pod-level memory.high.
func podConfig(pod *v1.Pod, memoryQoS bool, _ string, _ *float64) *cm.ResourceConfig {
	return cm.ResourceConfigForPod(pod, true, 100000, memoryQoS)
}

// kubeletDefaults: the factor of a kubelet configuration that names it (nil: not
// named), after the kubelet's own defaulting: a factor left out is 0.9. v1.35 has no
// reservation policy.
func kubeletDefaults(factor *float64, _ string) (*float64, string) {
	c := &kubeletconfigv1beta1.KubeletConfiguration{}
	if factor != nil {
		f := *factor
		c.MemoryThrottlingFactor = &f
	}
	kubeletdefaults.SetDefaults_KubeletConfiguration(c)
	return c.MemoryThrottlingFactor, ""
}

func qosNodeConfig(string) cm.NodeConfig {
	return cm.NodeConfig{CgroupsPerQOS: true}
}

// machine: the node's memory capacity as cadvisor reports it (the OOM score's base),
// node allocatable's here.
func machine() *cadvisorapi.MachineInfo {
	return &cadvisorapi.MachineInfo{MemoryCapacity: uint64(allocatable.Memory().Value())}
}

// newRuntime: the kubelet's runtime manager by its own constructor.
func newRuntime(ctx context.Context, root string, factor *float64, _ string) (any, error) {
	c := newCollaborators()
	rt, _, err := kuberuntime.NewKubeGenericRuntimeManager(ctx, c.recorder,
		proberesults.NewManager(), proberesults.NewManager(), proberesults.NewManager(),
		root, root, machine(), podStates{}, 110, c.os, c.helper, c.http, c.backoff,
		false, nil, 5, 10, string(kubeletconfig.NeverVerifyPreloadedImages), nil, "", "",
		nil, true, c.cfsPeriod, c.runtime, c.images,
		cm.NewFakeContainerManager(), logs.NewStubContainerLogManager(), nil,
		false, "", nodeAllocatable, *factor,
		pullTimes{}, noop.NewTracerProvider(), nil, nil)
	return rt, err
}
