package main

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet computes a container's cgroup values in an unexported method of its
// runtime manager (pkg/kubelet/kuberuntime/kuberuntime_container_linux.go,
// generateLinuxContainerResources; the same signature in v1.35-v1.38), called when it
// creates the container with Memory QoS enforced when the gate is on and the node is
// on cgroup v2. The oracle calls that method itself, on a manager built by the
// kubelet's own constructor (NewKubeGenericRuntimeManager, in oracle_v1XX.go) from
// the case's kubelet configuration: a reference to the method's symbol, not a copy of
// its code.
//
//go:linkname generateLinuxContainerResources k8s.io/kubernetes/pkg/kubelet/kuberuntime.(*kubeGenericRuntimeManager).generateLinuxContainerResources
func generateLinuxContainerResources(m unsafe.Pointer, ctx context.Context, pod *v1.Pod, container *v1.Container, enforceMemoryQoS bool) *runtimeapi.LinuxContainerResources

var runtimes = map[configKey]unsafe.Pointer{}

// runtimeRoot: the kubelet's root directory for every runtime manager (its image pull
// records and actuated state, which no container value reads).
var runtimeRoot string

// runtimeFor: the runtime manager of a kubelet configured with factor and policy,
// built once.
func runtimeFor(factor *float64, policy string) (unsafe.Pointer, error) {
	key := configKey{policy: policy}
	if factor != nil {
		key.factor, key.hasFactor = *factor, true
	}
	if m, ok := runtimes[key]; ok {
		return m, nil
	}
	if runtimeRoot == "" {
		root, err := os.MkdirTemp(scratch(), "runtime")
		if err != nil {
			return nil, err
		}
		runtimeRoot = root
	}
	rt, err := newRuntime(context.Background(), runtimeRoot, factor, policy)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's runtime manager: %w", err)
	}
	// The interface's value is the *kubeGenericRuntimeManager the method takes.
	v := reflect.ValueOf(rt)
	if v.Kind() != reflect.Pointer || v.Elem().Type().Name() != "kubeGenericRuntimeManager" {
		return nil, fmt.Errorf("the kubelet's runtime manager is a %T", rt)
	}
	m := v.UnsafePointer()
	runtimes[key] = m
	return m, nil
}

// scratch: a directory for the runtime managers' state files, removed by the test's
// temporary directory or the machine's.
func scratch() string {
	if d := os.Getenv("NODEMEM_ORACLE_SCRATCH"); d != "" {
		return d
	}
	return os.TempDir()
}

// containerValues: each init and app container's values as the kubelet creates it.
func containerValues(pod *v1.Pod, memoryQoS bool, factor *float64, policy string) ([]container, error) {
	m, err := runtimeFor(factor, policy)
	if err != nil {
		return nil, err
	}
	var out []container
	all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i := range all {
		lcr := generateLinuxContainerResources(m, context.Background(), pod, &all[i], memoryQoS)
		c := container{
			Name:    all[i].Name,
			Request: all[i].Resources.Requests.Memory().Value(),
			Limit:   all[i].Resources.Limits.Memory().Value(),
			values:  unified(lcr.Unified),
		}
		if lcr.MemoryLimitInBytes != 0 {
			max := lcr.MemoryLimitInBytes
			c.Max = &max
		}
		out = append(out, c)
	}
	return out, nil
}
