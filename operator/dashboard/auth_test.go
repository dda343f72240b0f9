package dashboard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"github.com/otad/otad/rollout"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/internal/testkit/mosquittotest"
)

const testToken = "0123456789abcdef-token"

func tokenFile(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAccessCheck(t *testing.T) {
	pki := mosquittotest.NewPKI(t)
	cert, key := pki.Server(t, "127.0.0.1")
	tok, short := tokenFile(t, testToken), tokenFile(t, "short")
	open := tokenFile(t, testToken)
	if err := os.Chmod(open, 0o666); err != nil {
		t.Fatal(err)
	}
	group := tokenFile(t, testToken)
	if err := os.Chmod(group, 0o640); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		a    Access
		bad  string // part of the error; "" when accepted
	}{
		{"loopback", Access{Listen: "127.0.0.1:8080"}, ""},
		{"localhost", Access{Listen: "localhost:0"}, ""},
		{"ipv6 loopback", Access{Listen: "[::1]:0"}, ""},
		{"loopback with a token", Access{Listen: "127.0.0.1:0", TokenFile: tok}, ""},
		{"everywhere, protected", Access{Listen: "0.0.0.0:0", TLSCert: cert, TLSKey: key, TokenFile: tok}, ""},
		{"everywhere, plain", Access{Listen: "0.0.0.0:8080"}, "not a loopback address"},
		{"no host", Access{Listen: ":8080", TokenFile: tok}, "not a loopback address"},
		{"TLS without a token", Access{Listen: "192.0.2.1:443", TLSCert: cert, TLSKey: key}, "--token-file"},
		{"a token without TLS", Access{Listen: "0.0.0.0:0", TokenFile: tok}, "--tls-cert"},
		{"a cert without its key", Access{Listen: "127.0.0.1:0", TLSCert: cert}, "go together"},
		{"a key that is no key", Access{Listen: "127.0.0.1:0", TLSCert: cert, TLSKey: tok}, "--tls-cert"},
		{"a short token", Access{Listen: "127.0.0.1:0", TokenFile: short}, "at least 16"},
		{"no token file", Access{Listen: "127.0.0.1:0", TokenFile: tok + ".missing"}, "--token-file"},
		{"no port", Access{Listen: "127.0.0.1"}, "host:port"},
		{"a token anyone may read", Access{Listen: "127.0.0.1:0", TokenFile: open}, "is mode 0666, readable or writable by others than its owner: want 0600"},
		{"a token its group may read", Access{Listen: "127.0.0.1:0", TokenFile: group}, "is mode 0640"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.a.Check()
			switch {
			case tt.bad == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)):
				t.Errorf("error %v, want one saying %q", err, tt.bad)
			}
		})
	}
}

// serve runs a Server of an empty fleet with acc on a listener of its own.
func serve(t *testing.T, acc *Access) string {
	t.Helper()
	if err := acc.Check(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", acc.Listen)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Fleet: fleetview.New("ota"), Rollouts: NewRollouts("ota", rollout.Trust{Unsigned: true}, nil), Access: acc}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return acc.URL(ln.Addr())
}

func get(t *testing.T, c *http.Client, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// On an address that is not loopback the dashboard speaks only TLS, and
// only to whoever has the token.
func TestTLSAndToken(t *testing.T) {
	pki := mosquittotest.NewPKI(t)
	cert, key := pki.Server(t, "127.0.0.1")
	url := serve(t, &Access{Listen: "0.0.0.0:0", TLSCert: cert, TLSKey: key, TokenFile: tokenFile(t, testToken)})
	if !strings.HasPrefix(url, "https://127.0.0.1:") {
		t.Fatalf("URL %s", url)
	}
	ca, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, CheckRedirect: noRedirect}

	for _, path := range []string{"", "api/summary", "api/devices", "api/live", "app.js"} {
		if res, _ := get(t, c, url+path); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without the token: %s", path, res.Status)
		}
	}
	if res, _ := get(t, c, url+"api/summary", "Authorization", "Bearer wrong-token-0123456789"); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token: %s", res.Status)
	}
	if res, _ := get(t, c, url+"?token=wrong-token-0123456789"); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token in the URL: %s", res.Status)
	}
	res, body := get(t, c, url+"api/summary", "Authorization", "Bearer "+testToken)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"devices":0`) {
		t.Errorf("with the token: %s %s", res.Status, body)
	}
	// Opening the page with the token sets a session cookie and drops the
	// token from the URL.
	res, _ = get(t, c, url+"?token="+testToken)
	cookies := res.Cookies()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" || len(cookies) != 1 ||
		cookies[0].MaxAge != int(sessionLife/time.Second) || !cookies[0].Secure || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || strings.Contains(cookies[0].Value, testToken) {
		t.Fatalf("login: %s, Location %q, cookies %+v", res.Status, res.Header.Get("Location"), cookies)
	}
	res, body = get(t, c, url, "Cookie", cookies[0].Name+"="+cookies[0].Value)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `<script src="app.js" defer>`) {
		t.Errorf("the page with the cookie: %s", res.Status)
	}
	if res.Header.Get("Content-Security-Policy") != policy {
		t.Errorf("CSP %q", res.Header.Get("Content-Security-Policy"))
	}
	// Plain HTTP gets no page.
	plain := &http.Client{}
	if res, body := get(t, plain, "http"+strings.TrimPrefix(url, "https")); res.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP: %s %s", res.Status, body)
	}
}

// On loopback without a token, only a loopback Host is answered: a page
// whose name was rebound to 127.0.0.1 gets nothing.
func TestLoopbackHost(t *testing.T) {
	url := serve(t, &Access{Listen: "127.0.0.1:0"})
	c := &http.Client{}
	if res, _ := get(t, c, url+"api/summary"); res.StatusCode != http.StatusOK {
		t.Errorf("loopback: %s", res.Status)
	}
	if res, _ := get(t, c, url+"api/summary", "Host", "localhost:8080"); res.StatusCode != http.StatusOK {
		t.Errorf("localhost: %s", res.Status)
	}
	if res, _ := get(t, c, url+"api/summary", "Host", "attacker.example:8080"); res.StatusCode != http.StatusForbidden {
		t.Errorf("a rebound name: %s", res.Status)
	}
}

// A session expires on the server too: a cookie kept past its life, or one
// whose expiry was moved later, is refused.
func TestSessionExpires(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	a := &Access{Listen: "127.0.0.1:0", TokenFile: tokenFile(t, testToken), Now: func() time.Time { return now }}
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
	h := a.guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/?token="+testToken, nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	cookies := w.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("no session cookie: %d", w.Code)
	}
	with := func(value string) int {
		req := httptest.NewRequest(http.MethodGet, "/api/summary", nil)
		req.AddCookie(&http.Cookie{Name: cookieName, Value: value})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	if code := with(cookies[0].Value); code != http.StatusOK {
		t.Errorf("a fresh session: %d", code)
	}
	now = now.Add(sessionLife - time.Minute)
	if code := with(cookies[0].Value); code != http.StatusOK {
		t.Errorf("a session near its end: %d", code)
	}
	now = now.Add(2 * time.Minute)
	if code := with(cookies[0].Value); code != http.StatusUnauthorized {
		t.Errorf("an expired session: %d", code)
	}
	_, mac, _ := strings.Cut(cookies[0].Value, ".")
	if code := with(fmt.Sprint(now.Add(time.Hour).Unix()) + "." + mac); code != http.StatusUnauthorized {
		t.Errorf("a session whose expiry was moved later: %d", code)
	}
}
