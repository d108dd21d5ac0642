// nri-runtime is the runtime side of the Node Resource Interface, as containerd and
// CRI-O run it (github.com/containerd/nri pkg/adaptation, the version containerd
// v2.2.9 requires): it listens on -socket for external plugins, synchronizes each one
// that registers with -sync-pods pods (enough of them to need chunks), then relays
// requests read from stdin, one JSON object per line, and prints what the plugins
// answered, one JSON object per line. The test peer of nodemem's NRI plugin.
//
//	{"op":"run_pod","pod":{...}}                    -> {"op":"run_pod"}
//	{"op":"create","pod":{...},"container":{...}}  -> {"op":"create","adjust":{...}}
//	{"op":"update","pod":{...},"container":{...},"resources":{...}} -> {"op":"update","update":[...]}
//
// Lines it prints on its own: {"event":"listening"}, then {"event":"synchronized","update":[...]}
// for each plugin that connects.
// Pods and containers are NRI's own messages in their JSON form.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"

	nri "github.com/containerd/nri/pkg/adaptation"
)

type command struct {
	Op        string              `json:"op"`
	Pod       *nri.PodSandbox     `json:"pod"`
	Container *nri.Container      `json:"container"`
	Resources *nri.LinuxResources `json:"resources"`
}

type reply struct {
	Op     string                   `json:"op,omitempty"`
	Event  string                   `json:"event,omitempty"`
	Adjust *nri.ContainerAdjustment `json:"adjust,omitempty"`
	Update []*nri.ContainerUpdate   `json:"update,omitempty"`
	Error  string                   `json:"error,omitempty"`
}

var out = json.NewEncoder(os.Stdout)
var outLock sync.Mutex

func say(r reply) {
	outLock.Lock()
	defer outLock.Unlock()
	_ = out.Encode(r)
}

func main() {
	socket := flag.String("socket", "", "where plugins connect")
	syncPods := flag.Int("sync-pods", 0, "pods (one container each) handed to every plugin's Synchronize")
	flag.Parse()
	pods, containers := syncState(*syncPods)
	// Start synchronizes the plugins it launched itself (none): only a plugin that
	// connected later is reported.
	started := false
	syncFn := func(ctx context.Context, cb nri.SyncCB) error {
		updates, err := cb(ctx, pods, containers)
		if !started {
			return err
		}
		r := reply{Event: "synchronized", Update: updates}
		if err != nil {
			r.Error = err.Error()
		}
		say(r)
		return nil
	}
	updateFn := func(ctx context.Context, u []*nri.ContainerUpdate) ([]*nri.ContainerUpdate, error) {
		say(reply{Event: "updates", Update: u})
		return nil, nil
	}
	empty, err := os.MkdirTemp("", "nri-plugins")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r, err := nri.New("nri-runtime", "v0.11.0", syncFn, updateFn,
		nri.WithSocketPath(*socket), nri.WithPluginPath(empty), nri.WithPluginConfigPath(empty))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := r.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	started = true
	say(reply{Event: "listening"})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			say(reply{Op: "invalid", Error: err.Error()})
			continue
		}
		say(relay(r, c))
	}
	r.Stop()
}

func relay(r *nri.Adaptation, c command) reply {
	// As containerd does around every request it relays: a plugin still being
	// synchronized is fully registered before the request reaches the plugins (the
	// adaptation prints "synchronized" from inside the sync, before it adds the plugin).
	block := r.BlockPluginSync()
	defer block.Unblock()
	ctx := context.Background()
	out := reply{Op: c.Op}
	var err error
	switch c.Op {
	case "run_pod":
		err = r.RunPodSandbox(ctx, &nri.StateChangeEvent{Pod: c.Pod})
	case "create":
		var rpl *nri.CreateContainerResponse
		rpl, err = r.CreateContainer(ctx, &nri.CreateContainerRequest{Pod: c.Pod, Container: c.Container})
		if rpl != nil {
			out.Adjust = rpl.Adjust
			out.Update = rpl.Update
		}
	case "update":
		var rpl *nri.UpdateContainerResponse
		rpl, err = r.UpdateContainer(ctx, &nri.UpdateContainerRequest{Pod: c.Pod, Container: c.Container, LinuxResources: c.Resources})
		if rpl != nil {
			out.Update = rpl.Update
		}
	default:
		err = fmt.Errorf("unknown op %q", c.Op)
	}
	if err != nil {
		out.Error = err.Error()
	}
	return out
}

// syncState makes n pods with a container each, their annotations large enough that
// a few thousand of them exceed ttrpc's 4 MiB message limit.
func syncState(n int) ([]*nri.PodSandbox, []*nri.Container) {
	var pods []*nri.PodSandbox
	var containers []*nri.Container
	pad := strings.Repeat("x", 2048)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("sync-%05d", i)
		pods = append(pods, &nri.PodSandbox{Id: "pod-" + id, Uid: "uid-" + id, Name: id, Namespace: "sync",
			Annotations: map[string]string{"pad": pad}})
		containers = append(containers, &nri.Container{Id: "ctr-" + id, PodSandboxId: "pod-" + id, Name: "app",
			State: nri.ContainerState_CONTAINER_RUNNING, Annotations: map[string]string{"pad": pad}})
	}
	return pods, containers
}
