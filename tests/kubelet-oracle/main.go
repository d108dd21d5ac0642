// kubelet-oracle: the kubelet's own code, built as a library at one Kubernetes version,
// answering what the kubelet writes to a pod's cgroup (issue 60). nodemem's tests send
// it generated pods and compare its answers with nodemem's
// (crates/nodemem-e2e/tests/kubelet_oracle.rs).
//
// Each line of stdin is one case, a JSON object:
//
//	{"pod": <a core/v1 Pod>, "memoryQoS": bool, "policy": "None"|"TieredReservation", "factor": number|null}
//
// The pod is defaulted as the apiserver defaults it (SetObjectDefaults_Pod: a
// container's limits become its missing requests, and so on), then given to the
// kubelet's pod cgroup computation as its pod container manager calls it
// (pkg/kubelet/cm/pod_container_manager_linux.go EnsureExists): ResourceConfigForPod
// with the CPU limits enforced, the CFS period 100ms and Memory QoS as given, then,
// with Memory QoS, the pod-level memory.high where this version has it. Each answer
// line is a JSON object:
//
//	{"pod": <the defaulted pod>, "max": bytes|null, "min": "...", "low": "...", "high": "..."}
//
// (max is ResourceConfig.Memory; min, low and high are its Unified entries, left out
// when unset), or {"error": "..."} for a line it cannot read. The version's own
// signatures are in the oracle_v1XX files, chosen by build tag.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	corev1defaults "k8s.io/kubernetes/pkg/apis/core/v1"
)

type request struct {
	Pod       v1.Pod   `json:"pod"`
	MemoryQoS bool     `json:"memoryQoS"`
	Policy    string   `json:"policy"`
	Factor    *float64 `json:"factor"`
}

type answer struct {
	Pod   *v1.Pod `json:"pod,omitempty"`
	Max   *int64  `json:"max"`
	Min   string  `json:"min,omitempty"`
	Low   string  `json:"low,omitempty"`
	High  string  `json:"high,omitempty"`
	Error string  `json:"error,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			_ = enc.Encode(answer{Error: fmt.Sprintf("not a case: %v", err)})
			continue
		}
		pod := req.Pod
		corev1defaults.SetObjectDefaults_Pod(&pod)
		rc := podConfig(&pod, req.MemoryQoS, req.Policy, req.Factor)
		a := answer{Pod: &pod, Max: rc.Memory}
		// The cgroup v2 file names as the kubelet's Unified map keys them (v1.35 has
		// no constant for memory.low).
		if rc.Unified != nil {
			a.Min = rc.Unified["memory.min"]
			a.Low = rc.Unified["memory.low"]
			a.High = rc.Unified["memory.high"]
		}
		if err := enc.Encode(a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
