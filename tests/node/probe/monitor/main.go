// value-monitor records, on the real node, every change of the files it is given (the
// cgroup files whose values nodemem holds) until a stop file exists: one line per
// change,
//
//	<Unix seconds with microseconds> <path> <value>
//
// `gone` as the value while a file cannot be read (its cgroup removed). The owners
// phase (crates/nodemem-e2e/tests/real_node/owners.rs) reads the lines as a timeline
// per file.
//
// cgroup v2 interface files send no inotify event when written, so it polls: every
// `-every` each file is read again with pread from an open descriptor, one system
// call per file. It replaces a bash loop that opened each file on every round: that
// loop spent 54 % of a CPU over 60 files at 20 rounds a second under TCG (measured
// 2026-11-29), about a third of the owners phase's CPU on every node (issue 57).
//
//	value-monitor -watch /run/nodemem-monitor/watch -stop /run/nodemem-monitor/stop -every 50ms
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// watched is one file: its descriptor while open, and the value last printed.
type watched struct {
	path    string
	fd      int
	printed string
	seen    bool
}

func main() {
	list := flag.String("watch", "/run/nodemem-monitor/watch", "the files to watch, one path per line")
	stop := flag.String("stop", "/run/nodemem-monitor/stop", "the monitor ends once this file exists")
	every := flag.Duration("every", 50*time.Millisecond, "the pause between two rounds")
	flag.Parse()
	paths, err := os.ReadFile(*list)
	if err != nil {
		fmt.Fprintln(os.Stderr, "the watch list:", err)
		os.Exit(1)
	}
	var files []*watched
	for _, p := range strings.Split(string(paths), "\n") {
		if p = strings.TrimSpace(p); p != "" {
			files = append(files, &watched{path: p, fd: -1})
		}
	}
	out := bufio.NewWriter(os.Stdout)
	buf := make([]byte, 4096)
	for {
		if _, err := os.Stat(*stop); err == nil {
			break
		}
		for _, f := range files {
			v := f.read(buf)
			if !f.seen || v != f.printed {
				now := time.Now()
				fmt.Fprintf(out, "%d.%06d %s %s\n", now.Unix(), now.Nanosecond()/1000, f.path, v)
				f.printed, f.seen = v, true
			}
		}
		out.Flush()
		time.Sleep(*every)
	}
	out.Flush()
}

// read gives the file's first line without its surrounding blanks (what bash's
// `read -r` gives), or "gone" when the file cannot be opened or read; a descriptor
// that fails is closed and the file opened again on a later round (a cgroup can be
// made again under the same path).
func (f *watched) read(buf []byte) string {
	if f.fd < 0 {
		fd, err := syscall.Open(f.path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return "gone"
		}
		f.fd = fd
	}
	n, err := syscall.Pread(f.fd, buf, 0)
	if err != nil || n < 0 {
		syscall.Close(f.fd)
		f.fd = -1
		return "gone"
	}
	line := buf[:n]
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	return string(bytes.TrimSpace(line))
}
