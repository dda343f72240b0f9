package mqtt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
)

// publishPacket encodes an MQTT 3.1.1 PUBLISH.
func publishPacket(topic string, qos byte, id uint16, payload []byte) []byte {
	vh := binary.BigEndian.AppendUint16(nil, uint16(len(topic)))
	vh = append(vh, topic...)
	if qos > 0 {
		vh = binary.BigEndian.AppendUint16(vh, id)
	}
	b := append([]byte{mqttPublish<<4 | qos<<1 | 1}, remainingLength(len(vh)+len(payload))...)
	return append(append(b, vh...), payload...)
}

// pipeConn serves a fixed byte stream as a net.Conn.
type pipeConn struct {
	net.Conn
	r     io.Reader
	reads int // largest single read asked of the stream
}

func (c *pipeConn) Read(p []byte) (int, error) {
	c.reads = max(c.reads, len(p))
	return c.r.Read(p)
}

type dropLog struct {
	mu     sync.Mutex
	topics []string
	sizes  []int
}

func (d *dropLog) add(topic string, _ byte, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.topics = append(d.topics, topic)
	d.sizes = append(d.sizes, n)
}

func TestLimitConnDropsOversizedPublish(t *testing.T) {
	big := bytes.Repeat([]byte{'x'}, 3<<20)
	var stream bytes.Buffer
	stream.Write(publishPacket("ota/devices/d/desired", 1, 1, []byte("small")))
	stream.Write(publishPacket("ota/devices/d/desired", 1, 7, big))
	stream.Write([]byte{0xd0, 0x00}) // PINGRESP
	stream.Write(publishPacket("ota/groups/g/desired", 0, 0, big[:ota.MaxEnvelopeSize+1]))
	stream.Write(publishPacket("ota/groups/g/desired", 1, 9, big[:ota.MaxEnvelopeSize])) // at the limit: kept
	pc := &pipeConn{r: &stream}
	var d dropLog
	c := newLimitConn(pc, ota.MaxEnvelopeSize, d.add)
	read := func() packets.ControlPacket {
		t.Helper()
		p, err := packets.ReadPacket(c)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := read().(*packets.PublishPacket); string(p.Payload) != "small" || p.MessageID != 1 {
		t.Fatalf("first: %v", p)
	}
	p := read().(*packets.PublishPacket)
	if len(p.Payload) != 0 || p.MessageID != 7 || p.Qos != 1 || !p.Retain || p.TopicName != "ota/devices/d/desired" {
		t.Fatalf("dropped QoS 1 message handed on as %v with %d payload bytes", p, len(p.Payload))
	}
	if _, ok := read().(*packets.PingrespPacket); !ok {
		t.Fatal("stream out of sync after a drop")
	}
	if p := read().(*packets.PublishPacket); len(p.Payload) != 0 || p.Qos != 0 || p.TopicName != "ota/groups/g/desired" {
		t.Fatalf("dropped QoS 0 message: %v", p)
	}
	if pc.reads > 4096 {
		t.Fatalf("a single read of %d bytes from the connection while dropping", pc.reads)
	}
	if p := read().(*packets.PublishPacket); len(p.Payload) != ota.MaxEnvelopeSize || p.MessageID != 9 {
		t.Fatalf("message at the limit: %d bytes", len(p.Payload))
	}
	if _, err := packets.ReadPacket(c); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
	if strings.Join(d.topics, " ") != "ota/devices/d/desired ota/groups/g/desired" || d.sizes[0] != len(big) {
		t.Fatalf("drops %v %v", d.topics, d.sizes)
	}
}

func TestLimitConnRefusesOversizedControlPacket(t *testing.T) {
	stream := append([]byte{0x90}, remainingLength(1<<20)...) // SUBACK of 1 MiB
	c := newLimitConn(&pipeConn{r: bytes.NewReader(stream)}, ota.MaxEnvelopeSize, nil)
	if _, err := packets.ReadPacket(c); !errors.Is(err, errOversized) {
		t.Fatalf("err = %v, want errOversized", err)
	}
}

// FuzzLimitConn: whatever the broker sends, no packet paho reads carries a
// payload over the limit, and nothing panics.
func FuzzLimitConn(f *testing.F) {
	f.Add(publishPacket("a/b", 1, 3, []byte("hello")))
	f.Add(append(publishPacket("t", 0, 0, make([]byte, 300)), 0xd0, 0))
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		c := newLimitConn(&pipeConn{r: bytes.NewReader(b)}, 64, nil)
		for range 64 {
			p, err := packets.ReadPacket(c)
			if err != nil {
				return
			}
			if pp, ok := p.(*packets.PublishPacket); ok && len(pp.Payload) > 64 {
				t.Fatalf("payload of %d bytes passed a 64 byte limit", len(pp.Payload))
			}
		}
	})
}

// Issue 9 (3): a message over the envelope limit on a desired topic is
// dropped before it is read, acknowledged (no redelivery on reconnect) and
// reported; later messages still arrive.
func TestOversizedMessagesOverMosquitto(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	dir := t.TempDir()
	bigFile := filepath.Join(dir, "big")
	if err := os.WriteFile(bigFile, bytes.Repeat([]byte("A"), 5<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	mosquittoPub(t, b, "-q", "1", "-r", "-t", "ota/groups/g1/desired", "-f", bigFile)
	var d dropLog
	cfg := Config{Broker: b.URL, DeviceID: "dev-1", Groups: []string{"g1"},
		OnOversized: func(topic string, n int) { d.add(topic, 0, n) }}
	o := newOffers()
	dev := dial(t, cfg, o)
	count := func(topic string) int {
		d.mu.Lock()
		defer d.mu.Unlock()
		n := 0
		for _, tp := range d.topics {
			if tp == topic {
				n++
			}
		}
		return n
	}
	waitFor(t, "the retained oversized message dropped", 10*time.Second, func() bool { return count("ota/groups/g1/desired") == 1 })
	mosquittoPub(t, b, "-q", "1", "-t", "ota/devices/dev-1/desired", "-f", bigFile)
	mosquittoPub(t, b, "-q", "1", "-t", "ota/devices/dev-1/desired", "-m", "small")
	if m := <-o.ch; m.payload != "small" {
		t.Fatalf("handler got %d bytes on %s, want only the small message", len(m.payload), m.topic)
	}
	if count("ota/devices/dev-1/desired") != 1 {
		t.Fatalf("drops %v", d.topics)
	}
	// The persistent session would redeliver an unacknowledged QoS 1 message.
	if err := dev.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	dial(t, cfg, o)
	waitFor(t, "the retained message dropped again", 10*time.Second, func() bool { return count("ota/groups/g1/desired") == 2 })
	time.Sleep(500 * time.Millisecond)
	if n := count("ota/devices/dev-1/desired"); n != 1 {
		t.Fatalf("the QoS 1 message was redelivered (%d drops): it was never acknowledged", n)
	}
	for _, m := range o.got {
		if len(m.payload) > ota.MaxEnvelopeSize || m.payload == "" {
			t.Fatalf("handler got a %d byte message on %s", len(m.payload), m.topic)
		}
	}
}
