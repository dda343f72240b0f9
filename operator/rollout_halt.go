package operator

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/controller"
)

// maxHaltList is how many failed devices a halt names.
const maxHaltList = 50

// haltReport says, when a rollout halted, which devices failed and how
// (their own codes), and what to run next.
func haltReport(w io.Writer, bf *brokerFlags, s rollout.State, failed []controller.Failure, n int) {
	fmt.Fprintf(w, "\nrollout %s HALTED: %s\n", s.Name, s.Reason)
	c := s.Counts
	if c.Pending > 0 {
		fmt.Fprintf(w, "%d offered devices have no outcome yet (the controller was stopped before they were all in)\n", c.Pending)
	} else {
		fmt.Fprintf(w, "every one of the %d devices offered has an outcome: %d failed, %d rolled back, %d rejected, %d timed out\n",
			c.Devices, c.Failed, c.RolledBack, c.Rejected, c.TimedOut)
	}
	if n > 0 {
		fmt.Fprintf(w, "failed devices (%d):\n", n)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, f := range failed {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", clean(f.Device), f.Result, clean(orDash(string(f.Code))), clean(f.Message))
		}
		tw.Flush()
		if n > len(failed) {
			fmt.Fprintf(w, "  and %d more (otactl status --broker … --group %s shows them all)\n", n-len(failed), s.Group)
		}
	}
	if c.TimedOut > 0 {
		fmt.Fprintf(w, "%d devices timed out: no outcome within device_timeout\n", c.TimedOut)
	}
	broker := bf.flagsLine()
	fmt.Fprintf(w, "next:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if n > 0 {
		fmt.Fprintf(tw, "  otactl status %s --device %s\t# a failed device's status\n", broker, clean(failed[0].Device))
	}
	fmt.Fprintf(tw, "  otactl rollout resume %s %s\t# accept these failures and go on (then start the controller again)\n", broker, s.Name)
	fmt.Fprintf(tw, "  otactl rollout abort --withdraw %s %s\t# stop for good and clear the offers it left retained\n", broker, s.Name)
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// flagsLine is the broker flags as given, for a command to copy: --broker
// (each), --prefix when not the default; never the password.
func (b *brokerFlags) flagsLine() string {
	var parts []string
	for _, u := range b.brokers {
		parts = append(parts, "--broker "+u)
	}
	if b.prefix != "" && b.prefix != mqtt.DefaultTopicPrefix {
		parts = append(parts, "--prefix "+b.prefix)
	}
	return strings.Join(parts, " ")
}
