package dashboard

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// 32 live streams held open (one client, or an attacker) do not lock out
// the next page: it loads and gets its stream, and the oldest of the
// client holding the most streams is closed instead.
func TestLiveStreamsFair(t *testing.T) {
	s, h := testServer(t, 3)
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := &http.Client{Timeout: 10 * time.Second}
	open := func() (*http.Response, *bufio.Reader) {
		t.Helper()
		res, err := c.Get(srv.URL + "/api/live")
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK {
			t.Fatalf("stream: %s", res.Status)
		}
		r := bufio.NewReader(res.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"devices":3`) {
				return res, r
			}
		}
	}
	var held []*http.Response
	var readers []*bufio.Reader
	for range maxStreams {
		res, r := open()
		held = append(held, res)
		readers = append(readers, r)
	}
	defer func() {
		for _, res := range held {
			res.Body.Close()
		}
	}()
	if n := s.live().count(); n != maxStreams {
		t.Fatalf("%d streams open, want %d", n, maxStreams)
	}
	// The 33rd page: its files, its summary and its stream.
	for _, path := range []string{"/", "/app.js", "/api/summary"} {
		res, err := c.Get(srv.URL + path)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("%s with %d streams held: %v %v", path, maxStreams, err, res)
		}
		res.Body.Close()
	}
	res, _ := open()
	defer res.Body.Close()
	if n := s.live().count(); n != maxStreams {
		t.Errorf("%d streams open, want at most %d", n, maxStreams)
	}
	// The oldest stream was closed for it.
	if _, err := io.ReadAll(readers[0]); err != nil {
		t.Errorf("the oldest stream: %v", err)
	}
}

// A stream outlives the server's read and write timeouts: it clears its
// read deadline and moves its write deadline on every update.
func TestLiveStreamOutlivesTimeouts(t *testing.T) {
	s, h := testServer(t, 1)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond
	srv.Start()
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.live().run(ctx)
	res, err := http.Get(srv.URL + "/api/live")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	next := func() string {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("the stream ended: %v", err)
			}
			if strings.HasPrefix(line, "data: ") {
				return line
			}
		}
	}
	next()
	time.Sleep(1500 * time.Millisecond) // past both timeouts
	s.Fleet.Observe("ota/devices/gw-new/status", []byte(`{"device":"gw-new","seq":1,"state":"idle"}`))
	s.Changed()
	if line := next(); !strings.Contains(line, `"devices":2`) {
		t.Errorf("after the timeouts: %.100s", line)
	}
}
