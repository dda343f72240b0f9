// Package tlsfiles turns the ca_file / cert_file / key_file keys of a config
// section ([mqtt], [download]) into a tls.Config. Errors name the key at fault.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Files are one section's TLS keys; Section prefixes the key names in errors
// ("mqtt" gives "mqtt.ca_file").
type Files struct {
	Section                   string
	CAFile, CertFile, KeyFile string
}

// Error is a bad TLS file setting; Key is the config key at fault.
type Error struct {
	Key string
	Msg string
}

func (e *Error) Error() string { return e.Key + ": " + e.Msg }

func (f Files) bad(key, format string, args ...any) error {
	return &Error{Key: f.Section + "." + key, Msg: fmt.Sprintf(format, args...)}
}

// Config loads the files. An empty CAFile keeps the system roots; a CA file
// replaces them, so a fleet's own server is trusted and nothing else is.
// CertFile and KeyFile (mTLS) go together.
func (f Files) Config(serverName string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, f.bad("ca_file", "%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, f.bad("ca_file", "%s: no PEM certificate found", f.CAFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case f.CertFile == "" && f.KeyFile == "":
	case f.CertFile == "":
		return nil, f.bad("cert_file", "empty but %s.key_file is set", f.Section)
	case f.KeyFile == "":
		return nil, f.bad("key_file", "empty but %s.cert_file is set", f.Section)
	default:
		// Stat first so a missing file is reported with its own key.
		if _, err := os.Stat(f.CertFile); err != nil {
			return nil, f.bad("cert_file", "%v", err)
		}
		if _, err := os.Stat(f.KeyFile); err != nil {
			return nil, f.bad("key_file", "%v", err)
		}
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, f.bad("cert_file", "%s with key %s: %v", f.CertFile, f.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
