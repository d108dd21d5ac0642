// workload is the real node's test workload: it allocates the given amount of memory,
// touches every page so that it is resident (and charged to the container's cgroup),
// reports it, and sleeps until SIGINT or SIGTERM; with -exit it ends there instead (an
// init container). With -cache it also writes a file of that size and syncs it: page
// cache charged to the container's cgroup that the kernel can reclaim at will, which is
// no working set. With -churn it then maps, touches and unmaps that much memory over
// and over: each round is charged anew, so above memory.high the kernel throttles it
// (and reports the stall as memory pressure) for as long as it runs.
//
// With -stream it writes a file of that size at -stream-rate bytes a second, 1 MiB at a
// time, and reads each MiB back twice as it goes: the second access makes its pages
// active, so the whole file becomes active page cache, which the kubelet's
// memory.available counts (a job streaming through data it will not read again).
//
// With -hot it writes a file of that size and then reads it whole over and over (ten
// times a second): page cache that is a working set, which reclaim must leave alone.
//
// With -report-cgroup it first prints its own cgroup's memory.min, memory.low and
// memory.high (the container's cgroup namespace shows its cgroup at /sys/fs/cgroup):
// the values it ran its first instructions under.
//
//	workload [-report-cgroup] [-allocate 64Mi] [-cache 200Mi] [-churn 32Mi]
//	         [-stream 600Mi -stream-rate 8Mi] [-hot 48Mi] [-exit]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// parseBytes reads 64Mi, 1Gi, 500M or a plain number of bytes.
func parseBytes(text string) (int64, error) {
	units := []struct {
		suffix string
		factor int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"K", 1000}, {"M", 1000 * 1000}, {"G", 1000 * 1000 * 1000}}
	for _, u := range units {
		if strings.HasSuffix(text, u.suffix) {
			n, err := strconv.ParseInt(strings.TrimSuffix(text, u.suffix), 10, 64)
			return n * u.factor, err
		}
	}
	return strconv.ParseInt(text, 10, 64)
}

// fillCache writes n bytes to path and syncs them: clean file pages in the page cache.
func fillCache(path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	for written := int64(0); written < n; written += int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), n-written)]); err != nil {
			return err
		}
	}
	return f.Sync()
}

// stream writes n bytes to path at rate bytes a second, reading each MiB back twice
// (active pages), and syncs each MiB so that the pages are clean (reclaimable).
func stream(path string, n, rate int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	back := make([]byte, len(chunk))
	for i := range chunk {
		chunk[i] = byte(i)
	}
	start := time.Now()
	for off := int64(0); off < n; off += int64(len(chunk)) {
		part := chunk[:min(int64(len(chunk)), n-off)]
		if _, err := f.WriteAt(part, off); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		for i := 0; i < 2; i++ {
			if _, err := f.ReadAt(back[:len(part)], off); err != nil {
				return err
			}
		}
		// Hold the rate: this MiB is due at (off+len)/rate seconds from the start.
		due := start.Add(time.Duration(float64(off+int64(len(part))) / float64(rate) * float64(time.Second)))
		time.Sleep(time.Until(due))
	}
	return nil
}

// readForever reads the file at path whole, ten times a second.
func readForever(path string) {
	buf := make([]byte, 1<<20)
	for {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "workload: -hot: %v\n", err)
			os.Exit(1)
		}
		for {
			if _, err := f.Read(buf); err != nil {
				break
			}
		}
		f.Close()
		time.Sleep(100 * time.Millisecond)
	}
}

// churnForever maps n bytes of anonymous memory, touches every page (each is charged
// to the cgroup) and unmaps them, in a loop.
func churnForever(n int) {
	for {
		b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			fmt.Fprintf(os.Stderr, "workload: mmap: %v\n", err)
			os.Exit(1)
		}
		for i := 0; i < n; i += 4096 {
			b[i] = 1
		}
		if err := syscall.Munmap(b); err != nil {
			fmt.Fprintf(os.Stderr, "workload: munmap: %v\n", err)
			os.Exit(1)
		}
	}
}

// reportCgroup prints the memory values of the cgroup the process runs in.
func reportCgroup() {
	line := "workload: at start"
	for _, file := range []string{"memory.min", "memory.low", "memory.high"} {
		value, err := os.ReadFile("/sys/fs/cgroup/" + file)
		if err != nil {
			line += " " + file + "=unreadable"
			continue
		}
		line += " " + file + "=" + strings.TrimSpace(string(value))
	}
	fmt.Println(line)
}

func main() {
	report := flag.Bool("report-cgroup", false, "print the own cgroup's memory.min, memory.low and memory.high first")
	allocate := flag.String("allocate", "0", "memory to allocate and keep resident (64Mi, 1Gi, bytes)")
	cache := flag.String("cache", "0", "page cache to fill by writing a file of this size")
	churn := flag.String("churn", "0", "memory to map, touch and unmap over and over, after -allocate")
	exit := flag.Bool("exit", false, "exit once the memory is resident (an init container)")
	streamSize := flag.String("stream", "0", "active page cache to build by writing and reading back a file of this size")
	streamRate := flag.String("stream-rate", "8Mi", "bytes a second -stream writes")
	hot := flag.String("hot", "0", "page cache to keep hot: a file of this size read whole ten times a second")
	flag.Parse()
	if *report {
		reportCgroup()
	}
	c, err := parseBytes(*cache)
	if err != nil || c < 0 {
		fmt.Fprintf(os.Stderr, "workload: -cache %q: not an amount of memory\n", *cache)
		os.Exit(2)
	}
	if c > 0 {
		if err := fillCache("/cache-file", c); err != nil {
			fmt.Fprintf(os.Stderr, "workload: -cache: %v\n", err)
			os.Exit(1)
		}
		fmt.Printf("workload: %d bytes of page cache\n", c)
	}
	if s, err := parseBytes(*streamSize); err != nil || s < 0 {
		fmt.Fprintf(os.Stderr, "workload: -stream %q: not an amount of memory\n", *streamSize)
		os.Exit(2)
	} else if s > 0 {
		rate, err := parseBytes(*streamRate)
		if err != nil || rate <= 0 {
			fmt.Fprintf(os.Stderr, "workload: -stream-rate %q: not a positive amount of memory\n", *streamRate)
			os.Exit(2)
		}
		fmt.Printf("workload: streaming %d bytes at %d a second\n", s, rate)
		if err := stream("/stream-file", s, rate); err != nil {
			fmt.Fprintf(os.Stderr, "workload: -stream: %v\n", err)
			os.Exit(1)
		}
		fmt.Printf("workload: streamed %d bytes\n", s)
	}
	n, err := parseBytes(*allocate)
	if err != nil || n < 0 {
		fmt.Fprintf(os.Stderr, "workload: -allocate %q: not an amount of memory\n", *allocate)
		os.Exit(2)
	}
	held := make([]byte, n)
	for i := int64(0); i < n; i += 4096 {
		held[i] = 1
	}
	fmt.Printf("workload: %d bytes resident\n", n)
	if *exit {
		return
	}
	r, err := parseBytes(*churn)
	if err != nil || r < 0 {
		fmt.Fprintf(os.Stderr, "workload: -churn %q: not an amount of memory\n", *churn)
		os.Exit(2)
	}
	if r > 0 {
		fmt.Printf("workload: churning %d bytes\n", r)
		go churnForever(int(r))
	}
	if h, err := parseBytes(*hot); err != nil || h < 0 {
		fmt.Fprintf(os.Stderr, "workload: -hot %q: not an amount of memory\n", *hot)
		os.Exit(2)
	} else if h > 0 {
		if err := fillCache("/hot-file", h); err != nil {
			fmt.Fprintf(os.Stderr, "workload: -hot: %v\n", err)
			os.Exit(1)
		}
		fmt.Printf("workload: reading %d bytes over and over\n", h)
		go readForever("/hot-file")
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
	// Keep the allocation alive until the end.
	if n > 0 && held[0] != 1 {
		os.Exit(1)
	}
}
