package mqtt

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// maxControlPacket bounds every other packet the broker sends (CONNACK,
// SUBACK, acks, PINGRESP are a few bytes): a larger one is a broken or
// hostile broker, and the connection is dropped.
const maxControlPacket = 64 << 10

// mqttPublish is the PUBLISH packet type (MQTT 3.1.1 §2.2.1).
const mqttPublish = 3

// errOversized ends a connection whose broker sent a packet no client needs.
var errOversized = errors.New("mqtt: oversized control packet from the broker")

// dropFunc is told of each inbound PUBLISH dropped for its size.
type dropFunc func(topic string, qos byte, payloadLen int)

// openLimited dials like paho would (tcp, or TLS for ssl:// with the
// broker's host as the server name) and wraps the connection in a
// limitConn: paho reads a whole packet (up to 256 MiB) into memory before
// any handler sees it, so the limit is enforced below it.
func openLimited(limit int, drop dropFunc) paho.OpenConnectionFunc {
	return func(uri *url.URL, o paho.ClientOptions) (net.Conn, error) {
		var conn net.Conn
		var err error
		switch uri.Scheme {
		case "ssl", "tls", "mqtts":
			tc := o.TLSConfig.Clone()
			if tc == nil {
				tc = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			if tc.ServerName == "" {
				tc.ServerName = uri.Hostname()
			}
			conn, err = (&tls.Dialer{NetDialer: o.Dialer, Config: tc}).Dial("tcp", uri.Host)
		case "tcp", "mqtt":
			conn, err = o.Dialer.Dial("tcp", uri.Host)
		default:
			err = fmt.Errorf("mqtt: scheme %q not supported", uri.Scheme)
		}
		if err != nil {
			return nil, err
		}
		return newLimitConn(conn, limit, drop), nil
	}
}

// limitConn parses the MQTT packets coming from the broker as they stream
// by. A PUBLISH whose payload is over limit is never read into memory: its
// payload is discarded from the stream in small reads, and paho is handed
// the same PUBLISH (flags, topic, packet ID) with an empty payload instead.
// So the stream stays in sync, and paho acknowledges it (PUBACK for QoS 1),
// so the broker does not redeliver it forever; the device's handler knows
// the empty message for a drop (drop is called first) and not a cleared
// retained offer.
type limitConn struct {
	net.Conn
	r     *bufio.Reader
	limit int
	drop  dropFunc
	out   []byte // bytes for paho before anything else: a header, or a rewritten PUBLISH
	pass  int    // body bytes of the current packet still to pass through
}

// readBuffer is small: it only has to hold packet headers (nothing is
// peeked), every connection keeps one for its life, and a fleet simulator
// runs ten thousand connections in one process.
const readBuffer = 512

func newLimitConn(c net.Conn, limit int, drop dropFunc) *limitConn {
	return &limitConn{Conn: c, r: bufio.NewReaderSize(c, readBuffer), limit: limit, drop: drop}
}

func (c *limitConn) Read(p []byte) (int, error) {
	for {
		if len(c.out) > 0 {
			n := copy(p, c.out)
			c.out = c.out[n:]
			return n, nil
		}
		if c.pass > 0 {
			if len(p) > c.pass {
				p = p[:c.pass]
			}
			n, err := c.r.Read(p)
			c.pass -= n
			return n, err
		}
		if err := c.next(); err != nil {
			return 0, err
		}
	}
}

// next reads the next packet's fixed header and decides what paho gets.
func (c *limitConn) next() error {
	first, err := c.r.ReadByte()
	if err != nil {
		return err
	}
	hdr := []byte{first}
	length := 0
	for i := 0; ; i++ {
		b, err := c.r.ReadByte()
		if err != nil {
			return err
		}
		hdr = append(hdr, b)
		length |= int(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			break
		}
		if i == 3 {
			return errors.New("mqtt: malformed remaining length from the broker")
		}
	}
	if first>>4 != mqttPublish {
		if length > maxControlPacket {
			return fmt.Errorf("%w: type %d, %d bytes", errOversized, first>>4, length)
		}
		c.out, c.pass = hdr, length
		return nil
	}
	if length <= c.limit {
		c.out, c.pass = hdr, length
		return nil
	}
	// Large: read the variable header (topic, packet ID) to know the payload's size.
	qos := (first >> 1) & 3
	var lenb [2]byte
	if _, err := io.ReadFull(c.r, lenb[:]); err != nil {
		return err
	}
	topicLen := int(binary.BigEndian.Uint16(lenb[:]))
	varLen := 2 + topicLen
	if qos > 0 {
		varLen += 2
	}
	if varLen > length {
		return errors.New("mqtt: malformed PUBLISH from the broker")
	}
	vh := make([]byte, varLen)
	copy(vh, lenb[:])
	if _, err := io.ReadFull(c.r, vh[2:]); err != nil {
		return err
	}
	payload := length - varLen
	if payload <= c.limit {
		c.out, c.pass = append(hdr, vh...), payload
		return nil
	}
	if _, err := c.r.Discard(payload); err != nil {
		return err
	}
	if c.drop != nil {
		c.drop(string(vh[2:2+topicLen]), qos, payload)
	}
	c.out = append(append([]byte{first}, remainingLength(varLen)...), vh...)
	return nil
}

// remainingLength encodes n as MQTT's variable-length integer.
func remainingLength(n int) []byte {
	var b []byte
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

// drops remembers the messages a limitConn dropped until paho hands over
// their empty stand-ins, so that a handler can tell a dropped message from
// an empty one (a cleared retained message).
type drops struct {
	mu   sync.Mutex
	list []drop
}

type drop struct {
	topic string
	size  int
}

// maxDropsPending bounds the record of dropped messages not yet handled.
const maxDropsPending = 64

func (d *drops) add(topic string, size int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.list) >= maxDropsPending {
		d.list = d.list[1:]
	}
	d.list = append(d.list, drop{topic, size})
}

// take reports (once) the size of the message an empty payload on topic
// stands for, or 0 when it is a real empty message.
func (d *drops) take(topic string, payload []byte) int {
	if len(payload) != 0 {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.list) > 0 && d.list[0].topic == topic {
		size := d.list[0].size
		d.list = d.list[1:]
		return size
	}
	return 0
}
