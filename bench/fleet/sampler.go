package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// peaks are the highest figures a sampler saw during one run.
type peaks struct {
	SelfRSS      int64 // this process's VmRSS, sampled
	SelfHWM      int64 // this process's VmHWM: the kernel's own peak since resetPeakRSS
	BrokerRSS    int64 // mosquitto's VmRSS, sampled
	BrokerHWM    int64 // mosquitto's VmHWM: the kernel's own peak, not sampled
	Goroutines   int
	FDs          int   // this process's open descriptors
	SelfMaxRSS   int64 // getrusage(RUSAGE_SELF) ru_maxrss: the peak over the whole process life
	Samples      int
	SampleErrors int
}

// sampler polls memory, goroutines and descriptors until stopped.
type sampler struct {
	brokerPID int
	every     time.Duration

	mu   sync.Mutex
	p    peaks
	last error
}

func procStatus(pid string, keys ...string) (map[string]int64, error) {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := parseProcStatus(f, keys...)
	if err != nil {
		return nil, fmt.Errorf("/proc/%s/status: %w", pid, err)
	}
	return m, nil
}

func countFDs() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	return len(names) - 1, err // minus the one reading the directory
}

func (s *sampler) sample() {
	self, err1 := procStatus("self", "VmRSS", "VmHWM")
	br, err2 := procStatus(fmt.Sprint(s.brokerPID), "VmRSS", "VmHWM")
	// Descriptors are counted every fdEvery-th sample: listing
	// /proc/self/fd at 10,000 devices cost the fleet 3% of its CPU
	// (go tool pprof of -cpuprofile), and they grow with the devices, not
	// in bursts.
	fds, err3 := -1, error(nil)
	if s.p.Samples%fdEvery == 0 {
		fds, err3 = countFDs()
	}
	g := runtime.NumGoroutine()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p.Samples++
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			s.p.SampleErrors++
			s.last = err
		}
	}
	s.p.SelfRSS = max(s.p.SelfRSS, self["VmRSS"])
	s.p.SelfHWM = max(s.p.SelfHWM, self["VmHWM"])
	s.p.BrokerRSS = max(s.p.BrokerRSS, br["VmRSS"])
	s.p.BrokerHWM = max(s.p.BrokerHWM, br["VmHWM"])
	s.p.Goroutines = max(s.p.Goroutines, g)
	s.p.FDs = max(s.p.FDs, fds)
}

// fdEvery: descriptors are counted on one sample in this many.
const fdEvery = 8

// run samples until ctx ends, then once more.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-ctx.Done():
			s.sample()
			return
		case <-t.C:
		}
	}
}

// peaks returns what was seen so far, with the process's rusage peak.
func (s *sampler) peaks() (peaks, error) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // cannot fail for RUSAGE_SELF
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.p
	p.SelfMaxRSS = ru.Maxrss << 10 // Linux reports kB
	return p, s.last
}
