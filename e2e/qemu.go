package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Machine is one emulated device: its disk, its firmware variables and the
// network and watchdog QEMU gives it. Starting it again (after a power cut)
// keeps the disk and the variables.
type Machine struct {
	Disk string // raw GPT disk image
	Vars string // writable copy of OVMF_VARS_4M.fd
	// Timeout bounds one QEMU run; `timeout -s KILL` enforces it even if the
	// test process dies.
	Timeout time.Duration
}

// Run is one running QEMU process.
type Run struct {
	Log     *SerialLog
	Started time.Time

	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	mu    sync.Mutex
	err   error
}

// Args is the QEMU command line (TCG: KVM did not run these guests; see docs/e2e.md).
func (m Machine) Args() []string {
	return []string{
		"-accel", "tcg", "-cpu", "max", "-M", "q35", "-m", "512", "-smp", "1",
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + OVMFCode,
		"-drive", "if=pflash,format=raw,unit=1,file=" + m.Vars,
		"-drive", "if=none,id=d0,format=raw,file=" + m.Disk,
		"-device", "virtio-blk-pci,drive=d0,bootindex=0",
		"-netdev", "user,id=n0,ipv6=off",
		// romfile=: no iPXE option ROM, so OVMF does not try to boot from the network.
		"-device", "virtio-net-pci,netdev=n0,romfile=",
		"-device", "i6300esb", "-action", "watchdog=reset",
		"-nographic", "-serial", "stdio", "-monitor", "none",
	}
}

// DirectMachine boots a kernel QEMU loads itself (-kernel, -initrd,
// -append), as a board's bootloader hands one over: no firmware, no GRUB.
// Disks are virtio disks in order (vda, vdb, ...). Each run is one boot
// (-no-reboot).
type DirectMachine struct {
	Kernel, Initrd, Append string
	Disks                  []string
	Timeout                time.Duration
}

// Args is the QEMU command line (TCG, as Machine).
func (m DirectMachine) Args() []string {
	args := []string{"-accel", "tcg", "-cpu", "max", "-M", "q35", "-m", "512", "-smp", "1",
		"-kernel", m.Kernel, "-initrd", m.Initrd, "-append", m.Append}
	for i, d := range m.Disks {
		args = append(args, "-drive", fmt.Sprintf("if=none,id=d%d,format=raw,file=%s", i, d), "-device", fmt.Sprintf("virtio-blk-pci,drive=d%d", i))
	}
	return append(args, "-netdev", "user,id=n0,ipv6=off", "-device", "virtio-net-pci,netdev=n0,romfile=",
		"-nographic", "-serial", "stdio", "-monitor", "none", "-no-reboot")
}

// Start boots the machine with its console going to logPath.
func (m DirectMachine) Start(logPath string) (*Run, error) {
	return startQEMU("qemu-system-x86_64", m.Args(), m.Timeout, logPath)
}

// DefaultFatalLines end a wait at once: the guest cannot get further.
func DefaultFatalLines() []*regexp.Regexp {
	return []*regexp.Regexp{
		regexp.MustCompile(`Kernel panic`),
		regexp.MustCompile(regexp.QuoteMeta(MarkerFatal)),
		regexp.MustCompile(`otad: no slot holds a verified image`),
	}
}

// Start boots the machine with its console going to logPath.
func (m Machine) Start(logPath string) (*Run, error) {
	return startQEMU("qemu-system-x86_64", m.Args(), m.Timeout, logPath)
}

// startQEMU runs one QEMU process under `timeout -s KILL`, its serial console
// (stdio) going to logPath; the console's input is a pipe (Run.Send).
func startQEMU(binary string, qemuArgs []string, timeout time.Duration, logPath string) (*Run, error) {
	qemu, err := lookPath(binary)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	log, err := NewSerialLog(logPath, DefaultFatalLines()...)
	if err != nil {
		return nil, err
	}
	args := append([]string{"-s", "KILL", strconv.Itoa(int(timeout.Seconds())), qemu}, qemuArgs...)
	cmd := exec.Command("timeout", args...)
	cmd.Stdout, cmd.Stderr = log, log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("qemu stdin: %w", err)
	}
	// Its own process group, so Kill reaches QEMU as well as timeout; and
	// SIGKILL to both if this process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	r := &Run{Log: log, Started: time.Now(), cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		log.Close()
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		close(r.done)
	}()
	return r, nil
}

// Send types text on the serial console (U-Boot's prompt reads it).
func (r *Run) Send(text string) error {
	if _, err := io.WriteString(r.stdin, text); err != nil {
		return fmt.Errorf("serial console input: %w", err)
	}
	return nil
}

// Done is closed when QEMU has exited.
func (r *Run) Done() <-chan struct{} { return r.done }

// Err is QEMU's exit error once Done is closed.
func (r *Run) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Kill cuts the power: SIGKILL to the run's process group (timeout and QEMU),
// then waits for the exit.
func (r *Run) Kill() {
	select {
	case <-r.done:
		return
	default:
	}
	if err := syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.cmd.Process.Kill()
	}
	<-r.done
}

// Wait waits for QEMU to exit by itself (the guest powered off), bounded by ctx.
func (r *Run) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for qemu to exit: %w", ctx.Err())
	}
}

// Expect waits for the next console line matching pattern (a regexp).
func (r *Run) Expect(ctx context.Context, pattern string) (string, error) {
	return r.Log.Expect(ctx, regexp.MustCompile(pattern))
}
