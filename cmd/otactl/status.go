package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/otad/otad/mqtt"
)

// statusSnapshot mirrors the SPEC §8 status snapshot (only what the table shows).
type statusSnapshot struct {
	Device     string              `json:"device"`
	Seq        uint64              `json:"seq"`
	State      string              `json:"state"`
	BootedSlot string              `json:"booted_slot"`
	Slots      map[string]slotInfo `json:"slots"`
	Target     *targetInfo         `json:"target"`
	LastResult *resultInfo         `json:"last_result"`
	Time       string              `json:"time"`
}

type slotInfo struct {
	Version string `json:"version"`
}

type targetInfo struct {
	ID         string `json:"id"`
	Version    string `json:"version"`
	BytesDone  int64  `json:"bytes_done"`
	BytesTotal int64  `json:"bytes_total"`
}

type resultInfo struct {
	Result string `json:"result"`
	Code   string `json:"code"`
}

// progressReport mirrors the SPEC §8 progress message.
type progressReport struct {
	ID             string  `json:"id"`
	BytesDone      int64   `json:"bytes_done"`
	BytesTotal     int64   `json:"bytes_total"`
	BytesPerSecond float64 `json:"bytes_per_second"`
}

// decodeStatus decodes a status snapshot from the broker (outside input).
func decodeStatus(b []byte) (statusSnapshot, error) {
	var s statusSnapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return statusSnapshot{}, fmt.Errorf("status snapshot: %w", err)
	}
	return s, nil
}

func decodeProgress(b []byte) (progressReport, error) {
	var p progressReport
	if err := json.Unmarshal(b, &p); err != nil {
		return progressReport{}, fmt.Errorf("progress: %w", err)
	}
	return p, nil
}

// deviceView is what is known of one device.
type deviceView struct {
	online     *bool
	status     *statusSnapshot
	statusErr  error
	progress   *progressReport
	progressAt time.Time
}

// fleet collects the device topics' messages; safe for concurrent use.
type fleet struct {
	prefix string
	now    func() time.Time

	mu      sync.Mutex
	devices map[string]*deviceView
}

func newFleet(prefix string) *fleet {
	return &fleet{prefix: prefix, now: time.Now, devices: map[string]*deviceView{}}
}

// update applies one message; it reports whether the table changed.
func (f *fleet) update(topic string, payload []byte) bool {
	id, leaf, ok := mqtt.DeviceOf(f.prefix, topic)
	if !ok {
		return false
	}
	var p progressReport
	switch leaf {
	case "status", "online":
	case "progress":
		var err error
		if p, err = decodeProgress(payload); err != nil {
			return false // best effort, QoS 0: a bad one is skipped
		}
	default:
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.devices[id]
	if d == nil {
		d = &deviceView{}
		f.devices[id] = d
	}
	switch leaf {
	case "status":
		d.status, d.statusErr = nil, nil
		if len(payload) == 0 { // retained status cleared
			break
		}
		s, err := decodeStatus(payload)
		if err != nil {
			d.statusErr = err
			break
		}
		d.status = &s
	case "online":
		var o struct {
			Online *bool `json:"online"`
		}
		if json.Unmarshal(payload, &o) != nil {
			o.Online = nil
		}
		d.online = o.Online
	case "progress":
		d.progress, d.progressAt = &p, f.now()
	}
	return true
}

func (f *fleet) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.devices)
}

// progressFresh is how long a progress message is shown after it arrived.
const progressFresh = 30 * time.Second

// render writes the fleet table; withBars adds a progress bar column (--watch).
func (f *fleet) render(w io.Writer, withBars bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.devices))
	for id := range f.devices {
		ids = append(ids, id)
	}
	sort.Strings(ids)

	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	header := "DEVICE\tONLINE\tSTATE\tBOOTED\tSLOT A\tSLOT B\tTARGET\tLAST RESULT\tSEQ"
	if withBars {
		header += "\tPROGRESS"
	}
	fmt.Fprintln(tw, header)
	now := f.now()
	for _, id := range ids {
		d := f.devices[id]
		online := "?"
		if d.online != nil {
			online = map[bool]string{true: "yes", false: "no"}[*d.online]
		}
		state, booted, slotA, slotB, target, last, seq := "?", "-", "-", "-", "-", "-", "-"
		var p *progressReport
		// A bar only while bytes move: progress is QoS 0 and rate limited, so
		// the last report is rarely 100% and must not outlive the download.
		moving := d.status == nil || d.status.State == "downloading" || d.status.State == "verifying"
		if d.progress != nil && moving && now.Sub(d.progressAt) < progressFresh {
			p = d.progress
		}
		switch s := d.status; {
		case d.statusErr != nil:
			state = "(bad status)"
		case s != nil:
			state = orDash(s.State)
			booted = orDash(s.BootedSlot)
			slotA, slotB = orDash(s.Slots["A"].Version), orDash(s.Slots["B"].Version)
			if t := s.Target; t != nil && (t.ID != "" || t.Version != "") {
				done, total := t.BytesDone, t.BytesTotal
				if p != nil && p.ID == t.ID { // progress is fresher than the snapshot
					done, total = p.BytesDone, p.BytesTotal
				}
				target = orDash(t.Version)
				if total > 0 {
					target += fmt.Sprintf(" %d%%", percent(done, total))
				}
			}
			if r := s.LastResult; r != nil && r.Result != "" {
				last = r.Result
				if r.Code != "" {
					last += "/" + r.Code
				}
			}
			seq = fmt.Sprint(s.Seq)
		}
		row := strings.Join([]string{clean(id), online, clean(state), clean(booted), clean(slotA), clean(slotB), clean(target), clean(last), seq}, "\t")
		if withBars {
			bar := ""
			if p != nil {
				bar = progressBar(p.BytesDone, p.BytesTotal, p.BytesPerSecond)
			}
			row += "\t" + bar
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clean keeps what a device sent from breaking the table or the terminal.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '\t' {
			return '?'
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 40 {
		s = string(r[:39]) + "…"
	}
	return s
}

func percent(done, total int64) int {
	if total <= 0 || done < 0 {
		return 0
	}
	return int(min(100, done*100/total))
}

// progressBar renders "[#####.....] 50% 12.3 MiB/s".
func progressBar(done, total int64, rate float64) string {
	const width = 20
	pct := percent(done, total)
	n := pct * width / 100
	s := fmt.Sprintf("[%s%s] %3d%%", strings.Repeat("#", n), strings.Repeat(".", width-n), pct)
	if rate > 0 {
		s += " " + humanRate(rate)
	}
	return s
}

func humanRate(r float64) string {
	units := []string{"B/s", "KiB/s", "MiB/s", "GiB/s"}
	i := 0
	for r >= 1024 && i < len(units)-1 {
		r /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", r, units[i])
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return exitCode(stderr, "status", status(ctx, args, stdout, stderr))
}

// status prints the fleet table from the retained status topics (SPEC §9).
func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("status", "--broker URL [--watch] [flags]", stderr)
	bf := addBrokerFlags(fset)
	watch := fset.Bool("watch", false, "keep running and redraw on every message, with progress bars (Ctrl-C ends)")
	timeout := fset.Duration("timeout", 2*time.Second, "without --watch: how long to collect the retained status messages")
	pos, err := parseFlags(fset, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("unexpected arguments %q", pos)
	}
	cfg, err := bf.config()
	if err != nil {
		return err
	}
	if *timeout <= 0 {
		return usagef("--timeout %v: want a positive duration", *timeout)
	}
	f := newFleet(cfg.TopicPrefix)
	if !*watch {
		// Retained messages arrive right after the subscription; collect them for a while.
		wctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		if err := mqtt.Watch(wctx, cfg, func(topic string, payload []byte) { f.update(topic, payload) }); err != nil {
			return err
		}
		if err := f.render(stdout, false); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
		if f.count() == 0 {
			fmt.Fprintf(stderr, "no device status under %s/devices/ within %v\n", cfg.TopicPrefix, *timeout)
		}
		return nil
	}
	return watchFleet(ctx, cfg, f, stdout)
}

// watchFleet redraws the table on every change (at most 10 times a second) until ctx ends.
func watchFleet(ctx context.Context, cfg mqtt.Config, f *fleet, stdout io.Writer) error {
	dirty := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- mqtt.Watch(ctx, cfg, func(topic string, payload []byte) {
			if f.update(topic, payload) {
				select {
				case dirty <- struct{}{}:
				default:
				}
			}
		})
	}()
	tty := isTerminal(stdout)
	for {
		select {
		case err := <-done:
			return err
		case <-dirty:
		}
		if tty {
			io.WriteString(stdout, "\x1b[H\x1b[2J") // home, clear screen
		} else {
			fmt.Fprintf(stdout, "--- %s\n", time.Now().Format(time.TimeOnly))
		}
		if err := f.render(stdout, true); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case err := <-done:
			return err
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
