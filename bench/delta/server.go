package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// countingServer serves a directory tree on 127.0.0.1 (Range requests
// included, as http.FileServer answers them) and counts the body bytes it
// sends: what a device, or casync, fetched.
type countingServer struct {
	url  string
	sent atomic.Int64
	srv  *http.Server
}

func startServer(dir string) (*countingServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("payload server: %w", err)
	}
	s := &countingServer{url: "http://" + ln.Addr().String()}
	files := http.FileServer(http.Dir(dir))
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		files.ServeHTTP(countingWriter{w, &s.sent}, r)
	})}
	go s.srv.Serve(ln) // ends with close
	return s, nil
}

func (s *countingServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		s.srv.Close()
	}
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}
