// Command explore runs the crash-state explorer (make crash): every state
// the persistence model gives at every point of a whole update, in every
// scenario, and a seeded sample of the states at every point of the
// recovery from each of those, up to -sample states a scenario (-sample 0:
// all of them, millions) (docs/design.md "The journal and crash safety").
// It prints each scenario's figures, the violations found, and ends with
// one line:
//
//	crash: N states explored in S scenarios, V violations
//
// It exits 1 when an invariant did not hold.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"

	"github.com/otad/otad/internal/testkit/crashstate"
)

func main() {
	workers := flag.Int("workers", runtime.GOMAXPROCS(0), "states explored at once")
	depth := flag.Int("depth", 2, "power cuts in a row: 1, or 2 (a second one during the recovery from the first)")
	sample := flag.Int("sample", 12000, "states a scenario: the first power cut's in full, then the second's in a seeded sample (0: all)")
	only := flag.String("scenarios", "", "explore only the scenarios whose name contains this (e.g. stream/grub)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *workers, *depth, *sample, *only); err != nil {
		fmt.Fprintln(os.Stderr, "crash:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, workers, depth, sample int, only string) error {
	var scenarios []crashstate.Scenario
	all := append(crashstate.Scenarios(crashstate.Modes()...), crashstate.UndoScenarios(crashstate.Modes()...)...)
	all = append(all, crashstate.RootScenarios()...)
	for _, s := range all {
		if strings.Contains(s.String(), only) {
			scenarios = append(scenarios, s)
		}
	}
	dir, err := os.MkdirTemp(tmpfs(), "otad-crash-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fx, err := crashstate.NewFixture()
	if err != nil {
		return err
	}
	defer fx.Close()
	model := crashstate.FullModel()
	fmt.Printf("crash: model %+v, depth %d, %d workers, images of %d bytes\n", model, depth, workers, crashstate.ImageSize)
	res, err := crashstate.Explore(ctx, fx, crashstate.Options{Scenarios: scenarios, Model: model, Depth: depth, Sample: sample,
		Workers: workers, Dir: dir, Log: func(s string) { fmt.Println(s) }})
	if err != nil {
		return err
	}
	for _, s := range res.Scenarios {
		for i, v := range s.Violations {
			if i == 5 {
				fmt.Printf("  %s: %d more\n", s.Scenario, len(s.Violations)-i)
				break
			}
			fmt.Printf("  %s: depth %d, %s (before %s): %s\n", s.Scenario, v.Depth, v.State, v.Op, strings.Join(v.Messages, "; "))
		}
	}
	runs := 0
	for _, s := range res.Scenarios {
		runs += s.Runs
	}
	fmt.Printf("crash: %d runs of the agent for %d states, wall %s\n", runs, res.States(), res.Wall.Round(1e9))
	fmt.Println(res.Summary())
	if res.Violations() > 0 {
		os.Exit(1)
	}
	return nil
}

// tmpfs is where the rigs' files go: a tmpfs if there is one.
func tmpfs() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}
