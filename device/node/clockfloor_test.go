package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/otad/otad/device/node"
	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/ota"
)

type clockAt struct{ t time.Time }

func (c clockAt) Now() time.Time { return c.t }

// Issue 21: one boot with the clock at 2099 must not move the clock floor.
// The floor advances only from authenticated time (an accepted offer's
// issued_at, the build time), so the next offer, signed now with the
// default 30-day expiry, is taken, not refused as expired.
func TestBootAt2099TakesTheNextValidOffer(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	v2, _ := tb.Offer("v2", 2, devicetest.OfferOpts{})
	if j := tb.Settle("v2", v2); j.LastResult.Result != ota.ResultSuccess {
		t.Fatalf("v2: %+v", j.LastResult)
	}
	// One boot with the clock far ahead: the agent journals what it does.
	in := tb.Start(func(p *node.Parts) { p.Deps.Clock = clockAt{time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)} })
	for in.D.Agent.Status().State != ota.Idle {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	in.Stop()
	devicetest.Must(t, in.Wait(t))
	// The clock is right again; an offer issued now, valid for 30 days.
	v3, sum := tb.Offer("v3", 3, devicetest.OfferOpts{Issued: time.Now().UTC(), Expires: 30 * 24 * time.Hour})
	in = tb.Start(nil)
	o, err := in.D.Agent.Install(context.Background(), v3)
	devicetest.Must(t, err)
	if o.Result != ota.ResultStaged || o.SHA256 != sum {
		in.Stop()
		in.Wait(t)
		t.Fatalf("the offer after a boot at 2099: %+v, want staged", o)
	}
	devicetest.Must(t, in.Wait(t)) // staged: the sim device reboots
}
