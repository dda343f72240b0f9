package fetch

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/otad/otad/ota"
)

// validatorOf returns what If-Range may carry: a strong ETag, else
// Last-Modified (weak ETags are not allowed in If-Range).
func validatorOf(h http.Header) string {
	if et := h.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
		return et
	}
	return h.Get("Last-Modified")
}

// parseContentRange parses "bytes START-END/TOTAL" (TOTAL may be "*", giving
// -1) and "bytes */TOTAL" (ok false, total set).
func parseContentRange(v string) (start, end, total int64, ok bool) {
	start, end, total = -1, -1, -1
	rest, found := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !found {
		return start, end, total, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return start, end, total, false
	}
	if tot != "*" {
		t, err := strconv.ParseInt(tot, 10, 64)
		if err != nil || t < 0 {
			return start, end, -1, false
		}
		total = t
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return start, end, total, false
	}
	s, err1 := strconv.ParseInt(a, 10, 64)
	e, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || s < 0 || e < s || (total >= 0 && e >= total) {
		return -1, -1, total, false
	}
	return s, e, total, true
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// isPermanentTransportError reports failures that retrying cannot fix:
// certificate problems, a TLS alert the server sent (it refused the
// handshake: a verdict, not the network), TLS spoken to a server that does
// not, and malformed requests.
func isPermanentTransportError(err error) bool {
	var (
		alert       tls.AlertError
		record      tls.RecordHeaderError
		op          *net.OpError
		unknownAuth *x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		verify      *tls.CertificateVerificationError
		refused     *ota.Error // a redirect the policy refused
	)
	return errors.As(err, &unknownAuth) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &verify) || errors.As(err, &refused) ||
		errors.As(err, &alert) || errors.As(err, &record) ||
		errors.As(err, &op) && op.Op == "remote error" // crypto/tls's word for an alert received
}
