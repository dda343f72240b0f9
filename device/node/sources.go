package node

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/otad/otad/ota"
)

// Sources are payloads given by hand for an offer (`otad install --payload`,
// docs/contract/commands.md): where its bytes are read from instead of the
// URLs it was signed with, a USB stick or another server. Only the place
// changes: the signed size, hashes and chunk index still bind the bytes, so a
// wrong file fails as a wrong download does (size_mismatch, hash_mismatch,
// index_mismatch). Kept by the offer's key (the manifest's digest) while the
// process runs; an install resumed after a restart fetches from the signed
// URLs again.
type Sources struct {
	mu sync.Mutex
	m  map[string]Source
}

// Source is where one offer's payload comes from: URL for a stream payload,
// IndexURL and StoreURL for a chunked one. Files are held open for it (passed
// over the control socket) and closed when it is dropped.
type Source struct {
	URL, IndexURL, StoreURL string
	Files                   []*os.File
	// Names are what the person typed for the URLs above that are passed
	// descriptors (/proc/self/fd/N): errors name their file, not the fd.
	Names map[string]string
}

// named is err with the files' URLs replaced by the names the person gave,
// its code kept: errors name the file as given (docs/contract/commands.md).
// An index or chunk that does not match names no file by itself (its field,
// index or store.chunk[i], is the payload's), so it is led by the file's name.
func (src Source) named(err error) error {
	if err == nil {
		return err
	}
	msg := err.Error()
	for u, name := range src.Names {
		msg = strings.ReplaceAll(msg, u, name)
		msg = strings.ReplaceAll(msg, strings.TrimPrefix(u, "file://"), name)
	}
	code := ota.CodeOf(err)
	if code == "" {
		code = ota.CodeWriteFailed
	}
	msg = strings.TrimPrefix(msg, string(code)+": ")
	file := ""
	switch code {
	case ota.CodeIndexMismatch:
		file = src.name(src.IndexURL)
	case ota.CodeChunkMismatch:
		file = src.name(src.StoreURL)
	}
	if file != "" && !strings.Contains(msg, file) {
		msg = file + ": " + msg
	}
	if msg == strings.TrimPrefix(err.Error(), string(code)+": ") {
		return err
	}
	return &ota.Error{Code: code, Err: errors.New(msg)}
}

// name is the name the person gave for u, or u itself.
func (src Source) name(u string) string {
	if n, ok := src.Names[u]; ok {
		return n
	}
	return u
}

// Put makes src the offer's source, replacing (and closing) an older one.
func (s *Sources) Put(key string, src Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]Source{}
	}
	s.m[key].Close()
	s.m[key] = src
}

// Drop forgets the offer's source and closes its files.
func (s *Sources) Drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key].Close()
	delete(s.m, key)
}

func (s *Sources) get(key string) (Source, bool) {
	if s == nil {
		return Source{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	src, ok := s.m[key]
	return src, ok
}

// Close closes the files held for the source.
func (src Source) Close() {
	for _, f := range src.Files {
		f.Close()
	}
}

// apply points p at src, and returns the schemes the fetch may then use: the
// configured ones and the source's own (the person who typed it chose it).
func (src Source) apply(p ota.Payload, schemes []string) (ota.Payload, []string, error) {
	var urls []string
	if c := p.Chunks; c != nil {
		if src.IndexURL == "" || src.StoreURL == "" {
			return p, nil, ota.Errorf(ota.CodeDownloadFailed, "the payload given for this offer is one file; the offer is chunked (give PATH for PATH.idx and PATH.store)")
		}
		cc := *c
		cc.IndexURL, cc.StoreURL = src.IndexURL, src.StoreURL
		p.Chunks = &cc
		urls = []string{src.IndexURL, src.StoreURL}
	} else {
		if src.URL == "" {
			return p, nil, ota.Errorf(ota.CodeDownloadFailed, "the payload given for this offer is chunked (PATH.idx, PATH.store); the offer's payload is one stream")
		}
		p.URL = src.URL
		urls = []string{src.URL}
	}
	out := append([]string(nil), schemes...)
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return p, nil, ota.Errorf(ota.CodeDownloadFailed, "payload location %q: %v", raw, err)
		}
		out = append(out, u.Scheme)
	}
	return p, out, nil
}

// FileURL is the file: URL of an absolute path (or of a file descriptor this
// process holds: /proc/self/fd/N).
func FileURL(path string) string { return (&url.URL{Scheme: "file", Path: path}).String() }

// FdURL is the file: URL of f, a file this process holds open (one passed
// over the control socket, which the daemon's sandbox may not see by name).
func FdURL(f *os.File) string { return FileURL(fmt.Sprintf("/proc/self/fd/%d", f.Fd())) }
