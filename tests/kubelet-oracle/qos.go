package main

import (
	"context"
	"fmt"
	"maps"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	kubefeatures "k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cm"
)

// The QoS classes' cgroups: the kubelet's QoS container manager (NewQOSContainerManager,
// exported), started once per kubelet configuration as the kubelet starts it, then asked
// to update the classes (UpdateCgroups, as its periodic loop and every pod admission
// do) with the case's pods active. What it writes goes to a recording cgroup manager;
// the answer is what each class's cgroup holds after the start and that update.

// allocatable: node allocatable memory, the same for the runtime manager and the
// QoS manager (and nodemem's node in the test).
var allocatable = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Gi")}

func nodeAllocatable() v1.ResourceList { return allocatable }

// recorder: a cgroup manager that keeps each cgroup's unified files. Only what the
// oracle asked for is kept (armed): the manager's own periodic update, started by
// Start, must not write a class's values under another case's feature gates.
type recorder struct {
	cm.CgroupManager // the rest of the interface, never called here
	mu               sync.Mutex
	armed            bool
	files            map[string]map[string]string
}

func (r *recorder) record(c *cm.CgroupConfig) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.armed || c.ResourceParameters == nil {
		return
	}
	name := c.Name.ToCgroupfs()
	if r.files[name] == nil {
		r.files[name] = map[string]string{}
	}
	maps.Copy(r.files[name], c.ResourceParameters.Unified)
}

func (r *recorder) arm(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = on
}

func (r *recorder) Create(_ klog.Logger, c *cm.CgroupConfig) error { r.record(c); return nil }
func (r *recorder) Update(_ klog.Logger, c *cm.CgroupConfig) error { r.record(c); return nil }
func (r *recorder) Validate(cm.CgroupName) error                   { return nil }
func (r *recorder) Exists(cm.CgroupName) bool                      { return true }

// qosManager: one started QoS container manager and what it has written.
type qosManager struct {
	manager cm.QOSContainerManager
	cgroups *recorder
	started map[string]map[string]string // what Start wrote
	mu      sync.Mutex
	active  []*v1.Pod
}

type qosKey struct {
	memoryQoS bool
	policy    string
}

var qosManagers = map[qosKey]*qosManager{}

// setMemoryQoSGate: the MemoryQoS feature gate as the case's kubelet has it (set only
// when it changes: setting a gate rebuilds every gate's state).
func setMemoryQoSGate(on bool) error {
	if utilfeature.DefaultFeatureGate.Enabled(kubefeatures.MemoryQoS) == on {
		return nil
	}
	return utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(kubefeatures.MemoryQoS): on})
}

func qosManagerFor(memoryQoS bool, policy string) (*qosManager, error) {
	key := qosKey{memoryQoS, policy}
	if q, ok := qosManagers[key]; ok {
		return q, nil
	}
	q := &qosManager{cgroups: &recorder{files: map[string]map[string]string{}}}
	manager, err := cm.NewQOSContainerManager(&cm.CgroupSubsystems{}, cm.NewCgroupName(cm.RootCgroupName, "kubepods"), qosNodeConfig(policy), q.cgroups)
	if err != nil {
		return nil, err
	}
	q.manager = manager
	activePods := func() []*v1.Pod {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.active
	}
	q.cgroups.arm(true)
	err = manager.Start(context.Background(), nodeAllocatable, activePods)
	q.cgroups.arm(false)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's QoS container manager: %w", err)
	}
	q.started = q.cgroups.files
	qosManagers[key] = q
	return q, nil
}

// qosValues: the QoS classes' cgroups with these pods active.
func qosValues(active []*v1.Pod, memoryQoS bool, policy string) (map[string]values, error) {
	if err := setMemoryQoSGate(memoryQoS); err != nil {
		return nil, err
	}
	q, err := qosManagerFor(memoryQoS, policy)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	q.active = active
	q.mu.Unlock()
	q.cgroups.mu.Lock()
	q.cgroups.files = map[string]map[string]string{}
	for name, files := range q.started {
		q.cgroups.files[name] = maps.Clone(files)
	}
	q.cgroups.mu.Unlock()
	q.cgroups.arm(true)
	err = q.manager.UpdateCgroups(klog.Background())
	q.cgroups.arm(false)
	if err != nil {
		return nil, err
	}
	out := map[string]values{}
	for class, name := range map[string]string{"kubepods": "/kubepods", "burstable": "/kubepods/burstable", "besteffort": "/kubepods/besteffort"} {
		out[class] = unified(q.cgroups.files[name])
	}
	return out, nil
}
