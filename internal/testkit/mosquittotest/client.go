package mosquittotest

import (
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Client connects a plain paho client to broker (a Broker.URL, or any
// broker's; mqtt:// is dialled as tcp://) as clientID, and disconnects it when
// the test ends. Tests watch and play devices with it, apart from the code
// under test. setup, if given, changes its options first (a persistent
// session, a default handler).
func Client(t testing.TB, broker, clientID string, setup ...func(*paho.ClientOptions)) paho.Client {
	t.Helper()
	opts := paho.NewClientOptions().AddBroker(strings.Replace(broker, "mqtt://", "tcp://", 1)).SetClientID(clientID)
	for _, s := range setup {
		s(opts)
	}
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("MQTT client %s: connect: %v", clientID, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// Subscribe subscribes c to filter at QoS 1 and waits for the broker's SUBACK.
func Subscribe(t testing.TB, c paho.Client, filter string, fn paho.MessageHandler) {
	t.Helper()
	tok := c.Subscribe(filter, 1, fn)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", filter, tok.Error())
	}
}
