package brokertest

import (
	"testing"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/rabbitmqtest"
)

// Broker is a running broker of a test.
type Broker interface {
	Address() string // mqtt://127.0.0.1:PORT
	// Restart stops the broker and starts it again on the same port with
	// the same data: persistent sessions and retained messages are kept.
	Restart()
	Stop()
}

// Kind is a supported broker and the behaviours tests may depend on.
type Kind struct {
	Name string
	// RetainedToWildcards: retained messages are delivered to wildcard
	// subscriptions (Mosquitto), not only to exact topics (RabbitMQ).
	RetainedToWildcards bool
	Start               func(t testing.TB) Broker
}

// Kinds are the brokers the integration tests run against.
func Kinds() []Kind {
	return []Kind{
		{Name: "mosquitto", RetainedToWildcards: true, Start: func(t testing.TB) Broker {
			return mosquittotest.Start(t, mosquittotest.Options{})
		}},
		{Name: "rabbitmq", RetainedToWildcards: false, Start: func(t testing.TB) Broker {
			return rabbitmqtest.Start(t, rabbitmqtest.Options{})
		}},
	}
}

// Each runs fn as a subtest per broker, each with a broker of its own that
// is stopped when the subtest ends.
func Each(t *testing.T, fn func(t *testing.T, k Kind, b Broker)) {
	for _, k := range Kinds() {
		t.Run(k.Name, func(t *testing.T) { fn(t, k, k.Start(t)) })
	}
}
