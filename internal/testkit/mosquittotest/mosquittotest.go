package mosquittotest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/otad/otad/internal/testkit/testtool"
)

// TLS makes the broker's listener a TLS one.
type TLS struct {
	CAFile, CertFile, KeyFile string // CA that signs client certificates; the server's pair
	RequireCertificate        bool   // mTLS: refuse clients without a certificate from CAFile
	UseIdentityAsUsername     bool   // the client certificate's CN becomes the username (for ACL %u)
}

// Options configure the broker.
type Options struct {
	TLS *TLS
	// ACL is the contents of an acl_file (mosquitto.conf(5)); empty means no ACL.
	ACL string
	// Extra lines appended to the generated mosquitto.conf.
	Extra []string
	// Quiet logs errors and warnings only, not a line per client (a fleet's broker).
	Quiet bool
	// LogTail keeps only the log's last LogTail bytes; 0 keeps it all.
	LogTail int
}

// Broker is a running (or stopped) mosquitto.
type Broker struct {
	URL  string // mqtt://127.0.0.1:PORT, or mqtts:// with TLS
	Port int
	Dir  string // config, persistence and log live here

	t    testing.TB // nil outside a test (Run)
	bin  string
	conf string
	log  *testtool.Buffer

	mu   sync.Mutex
	proc *process // nil when stopped
}

// Require returns the path of a Debian tool, or ends the test: t.Fatal when CI is set
// (CI must install it), t.Skip otherwise.
func Require(t testing.TB, tool, aptPackage string) string {
	t.Helper()
	return testtool.Require(t, tool, aptPackage)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Start runs a broker for the test and stops it in t.Cleanup (its log is printed if the
// test failed).
func Start(t testing.TB, opts Options) *Broker {
	t.Helper()
	Require(t, "mosquitto", "mosquitto")
	b, err := Run(context.Background(), t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	b.t = t
	testtool.StopAtEnd(t, "mosquitto ("+b.URL+")", b.Stop, b.Log)
	return b
}

// Run starts a broker outside a test (the fleet benchmark), its config, persistence and
// log in dir; Stop ends it.
func Run(ctx context.Context, dir string, opts Options) (*Broker, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	port, err := Port()
	if err != nil {
		return nil, err
	}
	b := &Broker{bin: bin, Port: port, Dir: dir, log: &testtool.Buffer{Max: opts.LogTail}}
	scheme := "mqtt"
	if opts.TLS != nil {
		scheme = "mqtts"
	}
	b.URL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, b.Port)
	b.conf = filepath.Join(b.Dir, "mosquitto.conf")
	if err := os.WriteFile(b.conf, []byte(b.config(opts)), 0o600); err != nil {
		return nil, fmt.Errorf("mosquitto config: %w", err)
	}
	if opts.ACL != "" {
		if err := os.WriteFile(filepath.Join(b.Dir, "acl"), []byte(opts.ACL), 0o600); err != nil {
			return nil, fmt.Errorf("mosquitto acl: %w", err)
		}
	}
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Broker) config(opts Options) string {
	lines := []string{
		"listener " + strconv.Itoa(b.Port) + " 127.0.0.1",
		// Identities come from client certificates (or nowhere) in tests; the ACL decides.
		"allow_anonymous true",
		// Restart keeps retained messages and persistent sessions.
		"persistence true",
		"persistence_location " + filepath.Join(b.Dir, "data") + "/",
		"log_dest stdout",
		"log_type error",
		"log_type warning",
		"log_timestamp_format %H:%M:%S",
	}
	if opts.Quiet {
		lines = append(lines, "connection_messages false")
	} else {
		lines = append(lines, "log_type notice", "log_type information", "log_type subscribe", "connection_messages true")
	}
	if os.Geteuid() == 0 {
		// As root mosquitto drops to user "mosquitto", which cannot read the directory.
		lines = append(lines, "user root")
	}
	if tc := opts.TLS; tc != nil {
		lines = append(lines, "cafile "+tc.CAFile, "certfile "+tc.CertFile, "keyfile "+tc.KeyFile)
		lines = append(lines, "require_certificate "+strconv.FormatBool(tc.RequireCertificate))
		lines = append(lines, "use_identity_as_username "+strconv.FormatBool(tc.UseIdentityAsUsername))
	}
	if opts.ACL != "" {
		lines = append(lines, "acl_file "+filepath.Join(b.Dir, "acl"))
	}
	lines = append(lines, opts.Extra...)
	return strings.Join(lines, "\n") + "\n"
}

func (b *Broker) start(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(b.Dir, "data"), 0o700); err != nil {
		return fmt.Errorf("mosquitto data: %w", err)
	}
	p, err := launch(ctx, b.bin, b.conf, b.Port, b.log)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.proc = p
	b.mu.Unlock()
	return nil
}

// Stop ends the broker gracefully (it saves its persistence file); a no-op when stopped.
func (b *Broker) Stop() {
	b.mu.Lock()
	p := b.proc
	b.proc = nil
	b.mu.Unlock()
	if p != nil {
		p.Stop()
	}
}

// Restart stops the broker if it runs and starts it again on the same port, with the
// retained messages and sessions it saved.
func (b *Broker) Restart() {
	b.t.Helper()
	b.Stop()
	if err := b.start(context.Background()); err != nil {
		b.t.Fatal(err)
	}
}

// Wipe deletes the saved state (retained messages, sessions); call it while stopped to
// restart as a broker that has never seen the clients.
func (b *Broker) Wipe() {
	b.t.Helper()
	if err := os.RemoveAll(filepath.Join(b.Dir, "data")); err != nil {
		b.t.Fatal(err)
	}
}

// Log returns what the broker logged so far.
func (b *Broker) Log() string { return b.log.String() }

// PID is mosquitto's process ID (0 when stopped), for its memory figures.
func (b *Broker) PID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc == nil {
		return 0
	}
	return b.proc.cmd.Process.Pid
}

// Exited reports whether mosquitto stopped without Stop.
func (b *Broker) Exited() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.proc != nil && b.proc.exited()
}

// Address is the broker's URL (brokertest.Broker).
func (b *Broker) Address() string { return b.URL }
