package demo

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/ota"
)

// summary prints the final table: where each device ended and how each rollout went.
func (d *run) summary(rollouts []rolloutSpec) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	header := []string{"DEVICE", "BOOTED", "RUNNING"}
	for i, r := range rollouts {
		header = append(header, fmt.Sprintf("ROLLOUT %d (%s)", i+1, r.version), "TOOK", "FETCHED")
	}
	header = append(header, "BOOTS")
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for i, id := range d.ids {
		st, _ := d.fleet.Status(id)
		row := []string{id, fleetview.OrDash(string(st.BootedSlot)), fleetview.OrDash(st.Slots[st.BootedSlot].Version)}
		for _, r := range rollouts {
			f, ok := d.fleet.Finished(id, "demo-"+r.version)
			if !ok {
				row = append(row, "-", "-", "-")
				continue
			}
			row = append(row, f.Outcome.String(), f.Took.Round(100*time.Millisecond).String(),
				fmt.Sprintf("%dKiB", (f.BytesFetched+1023)/1024))
		}
		row = append(row, strconv.Itoa(d.devices[i].Boots()))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	d.say("summary")
	if _, err := d.out.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	d.say("FETCHED: what each device downloaded for the rollout; for a chunked payload, the index and the chunks it did not hold")
	var problems []error
	// The fleet must end on the last image that committed.
	want := ""
	for _, r := range rollouts {
		if r.want.Result == ota.ResultSuccess {
			want = r.version
		}
	}
	for _, id := range d.ids {
		if st, _ := d.fleet.Status(id); st.Slots[st.BootedSlot].Version != want {
			problems = append(problems, fmt.Errorf("%s runs %q on slot %s, want %s", id, st.Slots[st.BootedSlot].Version, st.BootedSlot, want))
		}
	}
	for _, dev := range d.devices {
		if err := dev.Err(); err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", dev.ID, err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the fleet did not end as expected: %w", errors.Join(problems...))
	}
	return nil
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
