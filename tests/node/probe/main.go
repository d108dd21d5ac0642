// reaction-probe measures, on the real node, how long a new container's cgroup goes
// without nodemem's values: it watches the kubepods tree with inotify (the kernel's
// own notification, not a poll) and prints one line per container cgroup that
// appears, once its memory.low and memory.high hold values other than the runtime's
// defaults (0 and max; with the kubelet's Memory QoS off nobody else writes them):
//
//	<cgroup directory> <appeared, Unix ns> <values in place, Unix ns> <first sight>
//
// <first sight> is 1 when the values were already in place at the first read, the
// moment the directory's IN_CREATE arrived (set at creation: NRI), else 0. And one
// line per pod cgroup that appears (the kubelet makes it before the pod's sandbox):
//
//	pod <cgroup directory> <appeared, Unix ns>
//
// so a container's start is timed from its pod's cgroup to its own.
// A cgroup's watch is added the moment its IN_CREATE arrives and its files are read
// then, so a write that came before the watch still counts (at the time of that
// read: the figure is an upper bound). It runs until killed.
//
//	reaction-probe -root /sys/fs/cgroup/kubepods.slice -prefix cri-containerd-
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

const dirMask = syscall.IN_CREATE | syscall.IN_MODIFY | syscall.IN_ONLYDIR

type container struct {
	appeared int64
	done     bool
	checked  bool
}

func main() {
	root := flag.String("root", "/sys/fs/cgroup/kubepods.slice", "the tree to watch")
	prefix := flag.String("prefix", "cri-containerd-", "container cgroups' names start with this (empty: any directory in a pod's)")
	flag.Parse()
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		fmt.Fprintln(os.Stderr, "inotify:", err)
		os.Exit(1)
	}
	out := bufio.NewWriter(os.Stdout)
	dirs := map[int32]string{}
	containers := map[string]*container{}
	watch := func(dir string) {
		wd, err := syscall.InotifyAddWatch(fd, dir, dirMask)
		if err == nil {
			dirs[int32(wd)] = dir
		}
	}
	isContainer := func(dir string) bool {
		name := filepath.Base(dir)
		if *prefix != "" {
			return strings.HasPrefix(name, *prefix)
		}
		return strings.HasPrefix(filepath.Base(filepath.Dir(dir)), "pod")
	}
	check := func(dir string) {
		c := containers[dir]
		if c == nil || c.done {
			return
		}
		low, errLow := os.ReadFile(filepath.Join(dir, "memory.low"))
		high, errHigh := os.ReadFile(filepath.Join(dir, "memory.high"))
		if errLow != nil || errHigh != nil {
			return
		}
		first := !c.checked
		c.checked = true
		if strings.TrimSpace(string(low)) == "0" || strings.TrimSpace(string(high)) == "max" {
			return
		}
		c.done = true
		sight := 0
		if first {
			sight = 1
		}
		fmt.Fprintf(out, "%s %d %d %d\n", dir, c.appeared, time.Now().UnixNano(), sight)
		out.Flush()
	}
	filepath.Walk(*root, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.IsDir() {
			watch(path)
		}
		return nil
	})
	fmt.Fprintln(os.Stderr, "watching", len(dirs), "directories under", *root)
	buf := make([]byte, 64*1024)
	for {
		n, err := syscall.Read(fd, buf)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			fmt.Fprintln(os.Stderr, "read:", err)
			os.Exit(1)
		}
		now := time.Now().UnixNano()
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
			name := strings.TrimRight(string(nameBytes), "\x00")
			off += syscall.SizeofInotifyEvent + int(ev.Len)
			dir, ok := dirs[ev.Wd]
			if !ok || name == "" {
				continue
			}
			path := filepath.Join(dir, name)
			switch {
			case ev.Mask&syscall.IN_CREATE != 0 && ev.Mask&syscall.IN_ISDIR != 0:
				watch(path)
				if strings.Contains(name, "-pod") || strings.HasPrefix(name, "pod") {
					fmt.Fprintf(out, "pod %s %d\n", path, now)
					out.Flush()
				}
				if isContainer(path) {
					containers[path] = &container{appeared: now}
					check(path)
				}
			case ev.Mask&syscall.IN_MODIFY != 0 && (name == "memory.low" || name == "memory.high"):
				check(dir)
			}
		}
	}
}
