// kubelet-float: the kubelet's memory.high arithmetic, compiled by Go as the kubelet is,
// for nodemem's tests to compare with (crates/nodemem-e2e/tests/kubelet_float.rs).
//
// Each line of stdin is "REQUEST CEILING FACTOR PAGESIZE": two quantities as a pod spec
// writes them (read by k8s.io/apimachinery's resource.Quantity, whose Value() is what
// the kubelet takes), the factor as the kubelet's configuration file writes it (JSON's
// number, read by strconv.ParseFloat as encoding/json does), the page size in bytes.
// Each answer line is "REQUEST_BYTES CEILING_BYTES CONTAINER ALLOCATABLE POD": the
// bytes, then memory.high by each of the kubelet's three expressions below.
//
// The expressions are transcribed from the kubelet, shape for shape (Go fuses
// `a + x*y` into one multiply-add on arm64 and other architectures, and only the
// written shape decides where): v1.37.2 pkg/kubelet/kuberuntime/kuberuntime_container_linux.go
// lines 244-246 (a container with a limit) and 251-253 (without: node allocatable),
// pkg/kubelet/cm/helpers_linux.go lines 85-87 (memoryHighForPod); v1.36.3 and v1.35
// have the same container expressions (their factor a float64, not a pointer) and no
// pod-level one. The inputs come from stdin so that nothing is folded at compile time.
package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// container: a container's limit (kuberuntime_container_linux.go, v1.37.2 244-246).
func container(memoryRequest, memoryLimitVal int64, memoryThrottlingFactor *float64, defaultPageSize int64) int64 {
	return int64(math.Floor(
		float64(memoryRequest)+
			(float64(memoryLimitVal)-float64(memoryRequest))*float64(*memoryThrottlingFactor))/float64(defaultPageSize)) * defaultPageSize
}

// allocatable: a container without a limit (v1.37.2 251-253).
func allocatable(memoryRequest int64, allocatableMemory resource.Quantity, memoryThrottlingFactor *float64, defaultPageSize int64) int64 {
	return int64(math.Floor(
		float64(memoryRequest)+
			(float64(allocatableMemory.Value())-float64(memoryRequest))*(*memoryThrottlingFactor))/float64(defaultPageSize)) * defaultPageSize
}

// pod: memoryHighForPod's arithmetic (helpers_linux.go, v1.37.2 85-87).
func pod(memoryRequest, memoryLimit int64, throttlingFactor float64, pageSize int64) int64 {
	memoryHigh := int64(math.Floor(
		float64(memoryRequest)+
			(float64(memoryLimit)-float64(memoryRequest))*throttlingFactor)/float64(pageSize)) * pageSize
	return memoryHigh
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) != 4 {
			fmt.Fprintf(os.Stderr, "want REQUEST CEILING FACTOR PAGESIZE, got %q\n", in.Text())
			os.Exit(2)
		}
		request, err := resource.ParseQuantity(fields[0])
		check(err)
		ceiling, err := resource.ParseQuantity(fields[1])
		check(err)
		factor, err := strconv.ParseFloat(fields[2], 64)
		check(err)
		page, err := strconv.ParseInt(fields[3], 10, 64)
		check(err)
		r, c := request.Value(), ceiling.Value()
		fmt.Fprintf(out, "%d %d %d %d %d\n", r, c,
			container(r, c, &factor, page),
			allocatable(r, ceiling, &factor, page),
			pod(r, c, factor, page))
	}
	check(in.Err())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
