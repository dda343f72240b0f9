package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/otad/otad/rollout"

	"github.com/otad/otad/mqtt"
)

// offerInTime publishes an Offer, giving up when the lease is due to be
// renewed: a broker slow to acknowledge (a cluster failing over) must not
// hold the renewal up past the lease. The batch is asked for again on the
// next step, after the renewal; offers are the same bytes each time. A
// batch whose step took the time left (a million devices on a loaded
// machine) does not start: offering unbounded, it ran the lease out.
func (d *Driver) offerInTime(ctx context.Context, s rollout.State, o rollout.Offer) (int, error) {
	if l := s.Lease; l != nil && !s.RenewedHere().IsZero() {
		left := s.RenewedHere().Add(l.TTL() * 2 / 3).Sub(d.Now())
		if left <= 0 {
			return 0, fmt.Errorf("the lease is due for renewal (renewed %v ago): offering after it", d.Now().Sub(s.RenewedHere()).Round(time.Millisecond))
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, left)
		defer cancel()
	}
	done, err := d.offer(ctx, s, o)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return done, fmt.Errorf("the lease is due for renewal: %w", err)
	}
	return done, err
}

// partly is the confirmation of the first done devices of o, nil when
// there is nothing to confirm. A wave's batch is confirmed up to a place
// none of the devices not yet out shares (they are in the stable order).
func (d *Driver) partly(o rollout.Offer, done int) rollout.Input {
	if done <= 0 {
		return nil
	}
	if o.CatchUp {
		return rollout.CaughtUp{N: done}
	}
	for k := done; k > 0; k-- {
		p := rollout.PlaceOf(d.Plan.Name, o.Devices[k-1])
		if k == len(o.Devices) || rollout.PlaceOf(d.Plan.Name, o.Devices[k]) != p {
			return rollout.Offered{Wave: o.Wave, Through: p}
		}
	}
	return nil
}

// offerChunk bounds the offers published between two checks of the lease.
const offerChunk = 1000

// offer publishes the plan's envelope retained on each device's desired
// topic; it returns how many went out (whole chunks), in order.
func (d *Driver) offer(ctx context.Context, s rollout.State, o rollout.Offer) (int, error) {
	what := "offering"
	if o.CatchUp {
		what = "offering again (catch-up)"
	}
	d.Log.Info("rollout: "+what, "wave", o.Wave, "devices", len(o.Devices))
	for start := 0; start < len(o.Devices); start += offerChunk {
		if err := d.leaseLeft(s); err != nil {
			return start, err
		}
		chunk := o.Devices[start:min(start+offerChunk, len(o.Devices))]
		topics := make([]string, len(chunk))
		for i, dev := range chunk {
			topics[i] = mqtt.Topics{Prefix: d.Topics.Prefix, Device: dev}.Desired()
		}
		if err := d.Offers.PublishRetained(ctx, d.Plan.Offer.Envelope, topics...); err != nil {
			return start, err
		}
	}
	return len(o.Devices), nil
}
