// Command kstatus prints how GitOps tools judge one object given as JSON on stdin: the
// status (Current, InProgress, Failed, Terminating), a tab, and its message.
//
//	kstatus                      sigs.k8s.io/cli-utils' kstatus (kubectl's and kpt's)
//	kstatus -flux                Flux's fork of it, as kustomize-controller's health
//	                             checks run it for a custom kind
//	kstatus -flux -current EXPR [-failed EXPR] [-in-progress EXPR]
//	                             Flux's evaluator of a Kustomization's healthCheckExprs
//
// Built by tests/scripts/build-kstatus.sh from the modules, like the control plane;
// nodemem's tests run it against live policies.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	fluxstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/apis/kustomize"
	fluxcel "github.com/fluxcd/pkg/runtime/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	flux := flag.Bool("flux", false, "judge as Flux does")
	current := flag.String("current", "", "healthCheckExprs current (with -flux)")
	failed := flag.String("failed", "", "healthCheckExprs failed (with -flux)")
	inProgress := flag.String("in-progress", "", "healthCheckExprs inProgress (with -flux)")
	flag.Parse()
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin", err)
	}
	// The unstructured decoder keeps integers as int64, which kstatus reads
	// generation and observedGeneration as.
	var obj unstructured.Unstructured
	if err := obj.UnmarshalJSON(raw); err != nil {
		fail("decoding the object", err)
	}
	switch {
	case *flux && *current != "":
		eval, err := fluxcel.NewStatusEvaluator(&kustomize.HealthCheckExpressions{
			Current: *current, Failed: *failed, InProgress: *inProgress,
		})
		if err != nil {
			fail("parsing the expressions", err)
		}
		res, err := eval.Evaluate(context.Background(), &obj)
		if err != nil {
			fail("evaluating the expressions", err)
		}
		fmt.Printf("%s\t%s\n", res.Status, res.Message)
	case *flux:
		res, err := fluxstatus.Compute(&obj)
		if err != nil {
			fail("computing the status", err)
		}
		fmt.Printf("%s\t%s\n", res.Status, res.Message)
	default:
		res, err := status.Compute(&obj)
		if err != nil {
			fail("computing the status", err)
		}
		fmt.Printf("%s\t%s\n", res.Status, res.Message)
	}
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "kstatus: %s: %v\n", what, err)
	os.Exit(1)
}
