package dashboard

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Access says who may load the page: anyone who can reach a loopback
// address (the default), or, on any other address, only over TLS and with
// the token (docs/operating.md, the dashboard).
type Access struct {
	Listen            string           // host:port
	TLSCert, TLSKey   string           // PEM files; both or neither
	TokenFile         string           // the token, alone in the file (mode 0600 or stricter)
	Now               func() time.Time // the clock sessions expire by; nil: time.Now
	token             []byte
	tls               *tls.Config
	loopback, checked bool
}

// minToken is the shortest token accepted: a guessable one would make the
// TLS around it pointless.
const minToken = 16

// Check reads the TLS and token files and refuses a setting that would put
// the fleet's view on a network unprotected: an address that is not
// loopback needs TLS and a token.
func (a *Access) Check() error {
	host, _, err := net.SplitHostPort(a.Listen)
	if err != nil {
		return fmt.Errorf("--listen %q: want host:port: %w", a.Listen, err)
	}
	a.loopback = isLoopback(host)
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if !a.loopback && (a.TLSCert == "" || a.TokenFile == "") {
		return fmt.Errorf("--listen %s is not a loopback address: serving the fleet's view there needs --tls-cert, --tls-key and --token-file", a.Listen)
	}
	if a.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(a.TLSCert, a.TLSKey)
		if err != nil {
			return fmt.Errorf("--tls-cert %s, --tls-key %s: %w", a.TLSCert, a.TLSKey, err)
		}
		a.tls = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	if a.TokenFile != "" {
		fi, err := os.Stat(a.TokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		// Anyone who can read the token can steer rollouts from the page.
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			return fmt.Errorf("--token-file %s is mode %04o, readable or writable by others than its owner: want 0600 (chmod 600 %s)", a.TokenFile, perm, a.TokenFile)
		}
		b, err := os.ReadFile(a.TokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		a.token = bytes.TrimSpace(b)
		if len(a.token) < minToken || bytes.ContainsAny(a.token, " \t\r\n") {
			return fmt.Errorf("--token-file %s: want one token of at least %d characters without spaces, got %d characters", a.TokenFile, minToken, len(a.token))
		}
	}
	a.checked = true
	return nil
}

// TLS is the server's TLS configuration; nil to serve plain HTTP.
func (a *Access) TLS() *tls.Config { return a.tls }

// isLoopback: localhost, 127.0.0.0/8, ::1. An empty host is every
// interface, so not loopback.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// cookieName carries the session once the token was given.
const cookieName = "otad_dashboard"

// sessionLife is how long a session cookie lasts: in the browser
// (Max-Age) and on the server, which checks the expiry the cookie carries.
const sessionLife = 12 * time.Hour

// session is the cookie's value for a token, expiring at exp: the expiry
// and a MAC of it under the token (never the token itself), so a cookie
// cannot be made to last longer.
func session(token []byte, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	m := hmac.New(sha256.New, append([]byte("otad dashboard session\x00"), token...))
	m.Write([]byte(e))
	return e + "." + hex.EncodeToString(m.Sum(nil))
}

// sessionValid reports whether v is a session made with token that has not
// expired by now.
func sessionValid(token []byte, v string, now time.Time) bool {
	e, _, ok := strings.Cut(v, ".")
	sec, err := strconv.ParseInt(e, 10, 64)
	if !ok || err != nil {
		return false
	}
	exp := time.Unix(sec, 0)
	return now.Before(exp) && hmac.Equal([]byte(v), []byte(session(token, exp)))
}

// guard lets a request through when it may see the fleet:
//   - with a token: "Authorization: Bearer TOKEN", or the session cookie,
//     which opening the page with ?token=TOKEN sets (then the URL is
//     redirected without it, out of the history);
//   - without one (loopback only): a Host header naming a loopback address,
//     so a web page whose name was rebound to 127.0.0.1 cannot read it.
func (a *Access) guard(next http.Handler) http.Handler {
	if !a.checked {
		panic("dashboard: Access used before Check")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.token == nil {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			if !isLoopback(strings.Trim(host, "[]")) {
				http.Error(w, "this dashboard answers only to a loopback address (Host "+r.Host+")", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if q := r.URL.Query().Get("token"); q != "" && r.Method == http.MethodGet && r.URL.Path == "/" {
			if !a.tokenIs(q) {
				http.Error(w, "wrong token", http.StatusUnauthorized)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: session(a.token, a.now().Add(sessionLife)), Path: "/",
				MaxAge: int(sessionLife / time.Second), HttpOnly: true, Secure: a.tls != nil, SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		if a.allowed(r) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="otad dashboard"`)
		http.Error(w, "the dashboard needs its token: open /?token=TOKEN (the --token-file's), or send Authorization: Bearer TOKEN", http.StatusUnauthorized)
	})
}

func (a *Access) allowed(r *http.Request) bool {
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && a.tokenIs(bearer) {
		return true
	}
	c, err := r.Cookie(cookieName)
	return err == nil && sessionValid(a.token, c.Value, a.now())
}

func (a *Access) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *Access) tokenIs(s string) bool {
	return subtle.ConstantTimeCompare([]byte(s), a.token) == 1
}
