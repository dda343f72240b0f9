package mqtt

import (
	"context"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
)

// Per-device identity: client certificates name the device (use_identity_as_username) and
// the ACL lets a device read only its own and its groups' offers and write only its own
// status/events/progress/online.
const testACL = `pattern read ota/devices/%u/desired
pattern write ota/devices/%u/status
pattern write ota/devices/%u/events
pattern write ota/devices/%u/progress
pattern write ota/devices/%u/online
pattern read ota/fleet/report

user gw-1
topic read ota/groups/canary/desired
topic read ota/groups/canary/report

user operator
topic readwrite ota/#
`

func TestTLSClientCertsAndACL(t *testing.T) {
	pki := mosquittotest.NewPKI(t)
	srvCert, srvKey := pki.Server(t, "127.0.0.1")
	b := mosquittotest.Start(t, mosquittotest.Options{
		TLS: &mosquittotest.TLS{CAFile: pki.CAFile, CertFile: srvCert, KeyFile: srvKey,
			RequireCertificate: true, UseIdentityAsUsername: true},
		ACL: testACL,
	})
	as := func(cn string) Config {
		cert, key := pki.Client(t, cn)
		return Config{Broker: b.URL, CAFile: pki.CAFile, CertFile: cert, KeyFile: key, ConnectTimeout: 5 * time.Second}
	}
	operator, gw1 := as("operator"), as("gw-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for topic, payload := range map[string]string{
		"ota/devices/gw-1/desired":  "offer-gw-1",
		"ota/groups/canary/desired": "offer-canary",
		"ota/devices/gw-2/desired":  "offer-gw-2",
	} {
		if err := PublishRetained(ctx, operator, topic, []byte(payload)); err != nil {
			t.Fatalf("operator publish %s: %v", topic, err)
		}
	}
	statuses := observe(t, operator, "", "ota/devices/+/status")

	// The device gets its own and its group's offers over mTLS.
	devCfg := gw1
	devCfg.DeviceID, devCfg.Groups = "gw-1", []string{"canary"}
	o := newOffers()
	d := dial(t, devCfg, o)
	all(t, o.ch, map[string]string{"ota/devices/gw-1/desired": "offer-gw-1", "ota/groups/canary/desired": "offer-canary"}, 10*time.Second)
	d.PublishStatus([]byte(`{"device":"gw-1"}`))
	nextWith(t, statuses, "ota/devices/gw-1/status", `{"device":"gw-1"}`, 5*time.Second)

	// It may read the report requests, and answers them.
	req := NewReportRequest(time.Second).Encode()
	for _, topic := range []string{"ota/fleet/report", "ota/groups/canary/report"} {
		sess, err := Open(ctx, operator, nil, func(Message) {})
		if err != nil {
			t.Fatal(err)
		}
		if err := sess.Publish(ctx, topic, req); err != nil {
			t.Fatal(err)
		}
		sess.Close()
		nextWith(t, statuses, "ota/devices/gw-1/status", `{"device":"gw-1"}`, 5*time.Second)
	}

	// With gw-1's certificate, gw-2's offer is not readable ...
	spy := observe(t, gw1, "", "ota/devices/gw-2/desired")
	none(t, spy, "ota/devices/gw-2/desired", time.Second)
	// ... and gw-2's status is not writable (the broker acknowledges and drops it).
	if err := PublishRetained(ctx, gw1, "ota/devices/gw-2/status", []byte(`{"forged":true}`)); err != nil {
		t.Fatalf("publish as gw-1: %v", err)
	}
	none(t, statuses, "ota/devices/gw-2/status", time.Second)

	// A client without a certificate is refused.
	anon := Config{Broker: b.URL, CAFile: pki.CAFile, ConnectTimeout: 3 * time.Second}
	if err := PublishRetained(ctx, anon, "ota/devices/gw-1/status", []byte("x")); err == nil {
		t.Error("a client without a certificate could publish")
	}
	// And one that does not trust the broker's CA refuses the broker.
	other := mosquittotest.NewPKI(t)
	distrust := operator
	distrust.CAFile = other.CAFile
	if err := PublishRetained(ctx, distrust, "ota/devices/gw-1/status", []byte("x")); err == nil {
		t.Error("connected to a broker whose certificate is not from the configured CA")
	}
}
