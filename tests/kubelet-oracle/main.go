// kubelet-oracle: the kubelet's own code, built as a library at one Kubernetes version,
// answering what the kubelet writes to a pod's cgroup, its containers' and the QoS
// classes' (issue 60). nodemem's tests send it generated pods and compare its answers
// with nodemem's (crates/nodemem-e2e/tests/kubelet_oracle.rs).
//
// Each line of stdin is one case, a JSON object:
//
//	{"pod": <a core/v1 Pod>, "others": [<Pod>...], "memoryQoS": bool,
//	 "policy": "None"|"TieredReservation", "factor": number|null}
//
// ("others": the node's other active pods). The pod is defaulted as the apiserver defaults it (SetObjectDefaults_Pod: a
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
// when unset), or {"error": "..."} for a line it cannot read. The answer also holds:
// the kubelet configuration as the kubelet's defaulting leaves it ("factor",
// "policy"; kubeletDefaults), the other pods defaulted ("others"), each init and app
// container's values as the runtime manager gives them to the runtime ("containers",
// containers.go), and the QoS classes' cgroups ("qos": "kubepods", "burstable",
// "besteffort", qos.go) as the QoS container manager leaves them with these pods
// active. The version's own signatures
// are in the oracle_v1XX files, chosen by build tag.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	corev1defaults "k8s.io/kubernetes/pkg/apis/core/v1"
)

type request struct {
	Pod       v1.Pod   `json:"pod"`
	Others    []v1.Pod `json:"others"`
	MemoryQoS bool     `json:"memoryQoS"`
	Policy    string   `json:"policy"`
	Factor    *float64 `json:"factor"`
}

// values: one cgroup's memory files as the kubelet writes them (bytes as text, "max"),
// left out when the kubelet leaves the file alone.
type values struct {
	Max  *int64 `json:"max,omitempty"`
	Min  string `json:"min,omitempty"`
	Low  string `json:"low,omitempty"`
	High string `json:"high,omitempty"`
}

type container struct {
	Name string `json:"name"`
	// The container's memory request and limit as the kubelet reads them.
	Request int64 `json:"request"`
	Limit   int64 `json:"limit"`
	values
}

type answer struct {
	Pod        *v1.Pod           `json:"pod,omitempty"`
	Others     []v1.Pod          `json:"others,omitempty"`
	Factor     *float64          `json:"factor"`
	Policy     string            `json:"policy,omitempty"`
	Max        *int64            `json:"max"`
	Min        string            `json:"min,omitempty"`
	Low        string            `json:"low,omitempty"`
	High       string            `json:"high,omitempty"`
	Containers []container       `json:"containers,omitempty"`
	QoS        map[string]values `json:"qos,omitempty"`
	Error      string            `json:"error,omitempty"`
}

func main() {
	// The kubelet this oracle stands for runs on cgroup v2 (Memory QoS needs it),
	// whatever the machine running the tests mounts.
	assumeCgroupV2()
	// The kubelet's constructors log at level 0 (one runtime manager per factor).
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	// A short-lived process that keeps little: collect less often.
	debug.SetGCPercent(400)
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
		a, err := judge(&req)
		if err != nil {
			a = answer{Error: err.Error()}
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

// judge: one case through the kubelet's code.
func judge(req *request) (answer, error) {
	pod := req.Pod
	corev1defaults.SetObjectDefaults_Pod(&pod)
	for i := range req.Others {
		corev1defaults.SetObjectDefaults_Pod(&req.Others[i])
	}
	factor, policy := defaulted(req.Factor, req.Policy)
	rc := podConfig(&pod, req.MemoryQoS, policy, factor)
	a := answer{Pod: &pod, Others: req.Others, Factor: factor, Policy: policy, Max: rc.Memory}
	// The cgroup v2 file names as the kubelet's Unified map keys them (v1.35 has
	// no constant for memory.low).
	if rc.Unified != nil {
		a.Min = rc.Unified["memory.min"]
		a.Low = rc.Unified["memory.low"]
		a.High = rc.Unified["memory.high"]
	}
	containers, err := containerValues(&pod, req.MemoryQoS, factor, policy)
	if err != nil {
		return answer{}, err
	}
	a.Containers = containers
	active := append([]*v1.Pod{&pod}, podPointers(req.Others)...)
	qos, err := qosValues(active, req.MemoryQoS, policy)
	if err != nil {
		return answer{}, err
	}
	a.QoS = qos
	return a, nil
}

type configKey struct {
	factor    float64
	hasFactor bool
	policy    string
}

type config struct {
	factor *float64
	policy string
}

var defaults = map[configKey]config{}

// defaulted: kubeletDefaults, once per configuration (the kubelet's defaulting reads
// every feature gate).
func defaulted(factor *float64, policy string) (*float64, string) {
	key := configKey{policy: policy}
	if factor != nil {
		key.factor, key.hasFactor = *factor, true
	}
	c, ok := defaults[key]
	if !ok {
		c.factor, c.policy = kubeletDefaults(factor, policy)
		defaults[key] = c
	}
	return c.factor, c.policy
}

func podPointers(pods []v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, len(pods))
	for i := range pods {
		out[i] = &pods[i]
	}
	return out
}

// unified: a cgroup's memory files from the kubelet's Unified map.
func unified(u map[string]string) values {
	return values{Min: u["memory.min"], Low: u["memory.low"], High: u["memory.high"]}
}
