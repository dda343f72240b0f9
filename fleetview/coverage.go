package fleetview

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/otad/otad/mqtt"
)

// asked is the report request the view sent.
type asked struct {
	at     time.Time
	window time.Duration // as the devices bound it
	group  string        // "": the whole fleet
}

// answerGrace is how long after a request's window answers may still be on
// their way.
const answerGrace = time.Second

// FollowOptions shape View.Follow.
type FollowOptions struct {
	// Window is the report request's: devices answer at a random time
	// within it. 0 sends no request (retained statuses only).
	Window time.Duration
	// Group asks only this group's devices ({prefix}/groups/{group}/report)
	// and makes Coverage count only them; "" asks the whole fleet.
	Group string
	// Extra are more subscriptions on the same session (a rollout's state
	// and control topics, every rollout's states, the devices' desired
	// topics); their messages, and any other message the view does not
	// take, go to Other. A filter may hold wildcards.
	Extra map[string]byte
	Other func(mqtt.Message)
	// Events also follows every device's events topic, for Device's events.
	Events bool
	// Changed, if set, is called after a device message that changed the view.
	Changed func()
}

// Follow subscribes to every device's status, presence and progress (and
// o.Extra) on one session, feeds the device messages into v, and then asks
// the devices to report (o.Window): a fleet view cannot rely on a broker
// delivering thousands of retained statuses to one wildcard subscription
// (RabbitMQ delivers none). The caller closes the session; until then it
// can publish on it.
func (v *View) Follow(ctx context.Context, cfg mqtt.Config, o FollowOptions) (*mqtt.Session, error) {
	filters := mqtt.DeviceFilters(cfg.TopicPrefix)
	if o.Events {
		filters[mqtt.Topics{Prefix: cfg.TopicPrefix, Device: "+"}.Events()] = 0
	}
	maps.Copy(filters, o.Extra)
	sess, err := mqtt.Open(ctx, cfg, filters, func(m mqtt.Message) {
		_, extra := o.Extra[m.Topic]
		_, leaf, device := mqtt.DeviceOf(cfg.TopicPrefix, m.Topic)
		viewed := device && (leaf == "status" || leaf == "online" || leaf == "progress" || (leaf == "events" && o.Events))
		if (extra || !viewed) && o.Other != nil {
			o.Other(m)
			return
		}
		if v.ObserveMessage(m) && o.Changed != nil {
			o.Changed()
		}
	})
	if err != nil || o.Window <= 0 {
		return sess, err
	}
	if err := v.ask(ctx, sess, o.Group, o.Window); err != nil {
		sess.Close()
		return nil, err
	}
	// Statuses published while the session was down are lost to it, and a
	// broker may not deliver them as retained (RabbitMQ): ask again.
	sess.OnReconnect(func() { _ = v.ask(ctx, sess, o.Group, o.Window) })
	return sess, nil
}

// ask publishes a report request on sess, which is subscribed already: every
// answer arrives after it.
func (v *View) ask(ctx context.Context, sess *mqtt.Session, group string, window time.Duration) error {
	r := mqtt.NewReportRequest(window)
	t := mqtt.Topics{Prefix: v.prefix}
	topic := t.FleetReport()
	if group != "" {
		topic = t.GroupReport(group)
	}
	v.mu.Lock()
	v.asked = &asked{at: v.now(), window: r.Window(), group: group}
	v.mu.Unlock()
	// QoS 0, as devices subscribe: no acknowledgement to wait for behind
	// the retained statuses the broker is delivering meanwhile.
	if err := sess.Send(ctx, topic, r.Encode()); err != nil {
		return fmt.Errorf("report request: %w", err)
	}
	return nil
}

// AnswersDue is when the answers to the report request should all have
// arrived (its window and a grace second after it was sent); zero when no
// request was sent.
func (v *View) AnswersDue() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.asked.due()
}

// due is when a's answers should all have arrived; zero for no request.
func (a *asked) due() time.Time {
	if a == nil {
		return time.Time{}
	}
	return a.at.Add(a.window + answerGrace)
}

// Coverage says how the view was filled, so that a user can judge how
// complete it is: no view knows the size of the fleet, but it can tell
// when retained delivery evidently lost statuses.
type Coverage struct {
	Devices      int // devices in the view (with Group: those whose status lists it)
	Live         int // of them, statuses heard live: they answered the report request (or changed)
	RetainedOnly int // of them, statuses known only from a retained delivery
	NoStatus     int // of them, heard of without a valid status (presence, progress, a bad status)
	// Missed: of the live ones, those whose retained status never arrived
	// though they were online before the view subscribed: evidence that
	// the broker lost retained statuses, so offline devices may be
	// missing. A device that connected while the view listened (its
	// presence went online live) or first spoke after the answers were
	// due is not missed: it had no retained status to deliver yet.
	Missed int
	// Retained: of them, those whose retained status arrived (none on a
	// broker that delivers no retained message to a wildcard: RabbitMQ).
	Retained int
	Window   time.Duration // the report request's window; 0: none was sent
	Group    string        // the request asked only this group
}

// Coverage counts how the devices' statuses arrived.
func (v *View) Coverage() Coverage {
	v.mu.Lock()
	defer v.mu.Unlock()
	var c Coverage
	due := v.asked.due()
	if v.asked != nil {
		c.Window, c.Group = v.asked.window, v.asked.group
	}
	for _, d := range v.devices {
		if c.Group != "" && (d.status == nil || !slices.Contains(d.status.Groups, c.Group)) {
			continue
		}
		c.Devices++
		if d.retained {
			c.Retained++
		}
		switch {
		case d.status == nil:
			c.NoStatus++
		case d.live:
			c.Live++
			// A device first heard after the answers were due came online
			// since (a --watch runs on), and one whose presence went online
			// while the view listened connected since: neither had a
			// status retained to miss (a healthy fleet started after the
			// dashboard was called incomplete).
			if !d.retained && !d.connected && (due.IsZero() || !d.firstLive.After(due)) {
				c.Missed++
			}
		default:
			c.RetainedOnly++
		}
	}
	return c
}

// Incomplete reports whether devices may be missing from the view: no
// request was sent, or retained delivery lost the status of devices that
// answered, so it may have lost those of devices that could not answer
// (offline) as well.
func (c Coverage) Incomplete() bool { return c.Window == 0 || c.Missed > 0 }

// String says it for a user: "3000 devices (2987 answered the report
// request within 10s, 13 from retained only)", and why the view may be
// incomplete.
func (c Coverage) String() string {
	what := plural(c.Devices, "device")
	if c.Group != "" {
		what += " of group " + c.Group
	}
	without := ""
	if c.NoStatus > 0 {
		without = fmt.Sprintf(", %d without a valid status", c.NoStatus)
	}
	if c.Window == 0 {
		return fmt.Sprintf("%s, from retained statuses only (no report request sent%s); "+
			"offline devices may be missing: a broker may deliver only part of the saved statuses", what, without)
	}
	s := fmt.Sprintf("%s (%d answered the report request within %v, %d from retained only%s)",
		what, c.Live, c.Window, c.RetainedOnly, without)
	if c.Missed > 0 {
		s += fmt.Sprintf("; offline devices may be missing: the broker did not deliver the saved status of %d of the %d devices that answered, "+
			"so it may not have delivered those of devices that are offline now", c.Missed, c.Live)
	}
	return s
}

// Overflow says, for a broker that queues queue messages for a client
// before it drops (0: no limit), when the answers to the report request
// came faster than half of it a second (what the rollout controller's
// window allows: docs/brokers.md, a large fleet) and retained statuses did
// not make up for those dropped (none arrived, or some were missed): the
// setting that blocks the view and the window that would fit. "" when the
// view is not blocked so.
func (c Coverage) Overflow(queue int) string {
	if queue <= 0 || c.Window <= 0 || c.Devices == 0 || (c.Retained > 0 && c.Missed == 0) {
		return ""
	}
	perSecond := max(1, queue/2)
	rate := float64(c.Devices) / c.Window.Seconds()
	if rate <= float64(perSecond) {
		return ""
	}
	need := time.Duration(math.Ceil(float64(c.Devices)/float64(perSecond))) * time.Second
	return fmt.Sprintf("devices may be missing: %d answers within %v are about %.0f a second to this one connection, "+
		"over the %d a second a broker queue of %d messages for a client takes (Mosquitto's max_queued_messages, "+
		"EMQX's mqtt.max_mqueue_len: 1000 by default; docs/brokers.md, a large fleet), and retained statuses did not make up for those dropped: "+
		"ask with --window %v or more, or raise the setting and say so with --broker-queue", c.Devices, c.Window, rate, perSecond, queue, need)
}

// Say is String and, when the broker's queue blocks the view, Overflow.
func (c Coverage) Say(queue int) string {
	if o := c.Overflow(queue); o != "" {
		return c.String() + "; " + o
	}
	return c.String()
}
