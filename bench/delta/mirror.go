package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// mirror is where the image pair's packages come from: the machine's own
// Debian mirror, as its apt sources name it.
type mirror struct {
	main     string // serves SUITE and SUITE-updates
	security string // serves SUITE-security
	from     string // the file that named main ("-mirror" when given)
}

// aptSource is one source entry: the URIs that serve the suites.
type aptSource struct {
	uris   []string
	suites []string
	file   string
}

// sourceFiles are apt's source lists, in the order apt reads them.
func sourceFiles(root string) []string {
	files := []string{filepath.Join(root, "etc/apt/sources.list")}
	for _, ext := range []string{"*.list", "*.sources"} {
		m, _ := filepath.Glob(filepath.Join(root, "etc/apt/sources.list.d", ext))
		slices.Sort(m)
		files = append(files, m...)
	}
	return files
}

// readSources reads every source entry of the files that exist.
func readSources(files []string) ([]aptSource, error) {
	var all []aptSource
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("apt sources: %w", err)
		}
		var got []aptSource
		if strings.HasSuffix(f, ".sources") {
			got = parseDeb822(string(b))
		} else {
			got = parseOneLine(string(b))
		}
		for i := range got {
			got[i].file = f
		}
		all = append(all, got...)
	}
	return all, nil
}

// parseOneLine reads sources.list lines: "deb [options] URI SUITE COMPONENT...".
func parseOneLine(text string) []aptSource {
	var out []aptSource
	for line := range strings.SplitSeq(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			// Options may hold spaces: skip to the field that closes them.
			i := slices.IndexFunc(f, func(s string) bool { return strings.HasSuffix(s, "]") })
			if i < 0 || len(f) < i+3 {
				continue
			}
			f = f[i+1:]
		}
		out = append(out, aptSource{uris: []string{f[0]}, suites: []string{f[1]}})
	}
	return out
}

// parseDeb822 reads the stanzas of a .sources file (Types, URIs, Suites;
// Enabled: no skips one). Comment lines are dropped, continuation lines
// (starting with a space) extend the field before them.
func parseDeb822(text string) []aptSource {
	var out []aptSource
	fields := map[string]string{}
	last := ""
	flush := func() {
		if len(fields) > 0 && slices.Contains(strings.Fields(fields["types"]), "deb") &&
			!strings.EqualFold(strings.TrimSpace(fields["enabled"]), "no") {
			out = append(out, aptSource{uris: strings.Fields(fields["uris"]), suites: strings.Fields(fields["suites"])})
		}
		fields, last = map[string]string{}, ""
	}
	for line := range strings.SplitSeq(text+"\n", "\n") {
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	return out
}

// findMirror picks the first network URI serving suite, and the first
// serving suite-security (else the main mirror's debian-security beside
// it, as deb.debian.org and its mirrors lay them out).
func findMirror(sources []aptSource, suite string) (mirror, error) {
	pick := func(s string) (string, string) {
		for _, src := range sources {
			if !slices.Contains(src.suites, s) {
				continue
			}
			for _, u := range src.uris {
				if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
					return strings.TrimSuffix(u, "/"), src.file
				}
			}
		}
		return "", ""
	}
	var m mirror
	m.main, m.from = pick(suite)
	if m.main == "" {
		return m, fmt.Errorf("no apt source serves %s over http(s): the bench builds its images with debootstrap from the machine's Debian mirror; name one with -mirror http://deb.debian.org/debian", suite)
	}
	if m.security, _ = pick(suite + "-security"); m.security == "" {
		m.security = trimDebian(m.main) + "/debian-security"
	}
	return m, nil
}

// trimDebian drops a mirror URI's /debian: where deb.debian.org's layout
// puts debian-security beside it.
func trimDebian(uri string) string {
	return strings.TrimSuffix(strings.TrimSuffix(uri, "/"), "/debian")
}

// release is what a suite's Release file says about it.
type release struct {
	suite, codename, version, date string
}

func (r release) String() string {
	s := r.codename
	if r.version != "" {
		s += " " + r.version
	}
	if r.date != "" {
		s += " (" + r.date + ")"
	}
	return s
}

// parseRelease reads the header fields of a Release file.
func parseRelease(r io.Reader) release {
	var rel release
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.HasPrefix(k, " ") {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Suite":
			rel.suite = v
		case "Codename":
			rel.codename = v
		case "Version":
			rel.version = v
		case "Date":
			rel.date = v
		}
	}
	return rel
}

// fetchRelease reads BASE/dists/SUITE/Release: that the mirror answers, and
// what the suite is. Bounded: a mirror that does not answer in 30 s is down.
func fetchRelease(ctx context.Context, base, suite string) (release, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	url := base + "/dists/" + suite + "/Release"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return release{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return release{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return release{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	rel := parseRelease(io.LimitReader(resp.Body, 1<<20))
	if rel.codename == "" {
		return release{}, fmt.Errorf("GET %s: not a Release file (no Codename)", url)
	}
	return rel, nil
}
