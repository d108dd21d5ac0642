package main

import (
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	critest "k8s.io/cri-api/pkg/apis/testing"
	containertest "k8s.io/kubernetes/pkg/kubelet/container/testing"
)

// The runtime manager's collaborators that every version's constructor takes
// (oracle_v1XX.go passes them in its own order): the CRI's fake runtime and image
// services, the kubelet's own fakes, and recorders that drop what they are told. The
// container values reach none of them; the machine's memory capacity (the OOM score,
// in oracle_v1XX.go: cadvisor's package moved in v1.37) is node allocatable's.
type collaborators struct {
	recorder  *record.FakeRecorder
	os        *containertest.FakeOS
	helper    *containertest.FakeRuntimeHelper
	http      *http.Client
	backoff   *flowcontrol.Backoff
	cfsPeriod metav1.Duration
	runtime   *critest.FakeRuntimeService
	images    *critest.FakeImageService
}

func newCollaborators() collaborators {
	return collaborators{
		recorder:  &record.FakeRecorder{}, // no channel: events are dropped
		os:        &containertest.FakeOS{},
		helper:    &containertest.FakeRuntimeHelper{},
		http:      &http.Client{},
		backoff:   flowcontrol.NewBackOff(time.Second, 300*time.Second),
		cfsPeriod: metav1.Duration{Duration: 100 * time.Millisecond},
		runtime:   critest.NewFakeRuntimeService(),
		images:    critest.NewFakeImageService(),
	}
}

type podStates struct{}

func (podStates) IsPodTerminationRequested(kubetypes.UID) bool { return false }
func (podStates) ShouldPodContentBeRemoved(kubetypes.UID) bool { return false }
func (podStates) ShouldPodRuntimeBeRemoved(kubetypes.UID) bool { return false }

type pullTimes struct{}

func (pullTimes) RecordImageStartedPulling(kubetypes.UID)  {}
func (pullTimes) RecordImageFinishedPulling(kubetypes.UID) {}

type initTimes struct{}

func (initTimes) RecordInitContainerStarted(kubetypes.UID, time.Time)  {}
func (initTimes) RecordInitContainerFinished(kubetypes.UID, time.Time) {}
