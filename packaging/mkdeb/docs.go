package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/files"
)

// expandDocGlobs turns an entry whose source is a glob of Markdown pages
// ("docs/contract/*.md" into a directory) into one entry a page, so that
// rewriteDocs sees every page the package ships and where.
func expandDocGlobs(info *nfpm.Info) error {
	var out files.Contents
	for _, c := range info.Contents {
		if !strings.ContainsAny(c.Source, "*?[") || !strings.HasSuffix(c.Source, ".md") {
			out = append(out, c)
			continue
		}
		matches, err := filepath.Glob(c.Source)
		if err != nil {
			return err
		}
		if len(matches) == 0 {
			return fmt.Errorf("%s: no file", c.Source)
		}
		for _, m := range matches {
			e := *c
			e.Source, e.Destination = m, path.Join(c.Destination, filepath.Base(m))
			e.FileInfo = &files.ContentFileInfo{}
			*e.FileInfo = *c.FileInfo
			out = append(out, &e)
		}
	}
	info.Contents = out
	return nil
}

var (
	mdLink      = regexp.MustCompile(`\]\(([^)\s#]*)(#[^)\s]*)?\)`)
	htmlComment = regexp.MustCompile(`(?s)<!--.*?-->\n?`)
)

// rewriteDocs makes the Markdown pages the package ships read right where
// they are installed: a relative link to a file the package ships points at
// its installed place, one to a file it does not ship at the project's web
// page of it (homepage/blob/main/PATH), and HTML comments (notes to the
// project's writers) are left out. The rewritten pages are written to dir.
func rewriteDocs(info *nfpm.Info, dir string) error {
	shipped := map[string]string{} // repository path -> installed path
	for _, c := range info.Contents {
		if c.Source != "" {
			shipped[filepath.Clean(c.Source)] = c.Destination
		}
	}
	for i, c := range info.Contents {
		if !strings.HasSuffix(c.Destination, ".md") || c.Source == "" {
			continue
		}
		text, err := os.ReadFile(c.Source)
		if err != nil {
			return err
		}
		text = htmlComment.ReplaceAll(text, nil)
		text = mdLink.ReplaceAllFunc(text, func(m []byte) []byte {
			sub := mdLink.FindSubmatch(m)
			target, frag := string(sub[1]), string(sub[2])
			if target == "" || strings.Contains(target, ":") || strings.HasPrefix(target, "/") {
				return m // a fragment of this page, a URL, an absolute path
			}
			repo := filepath.Clean(filepath.Join(filepath.Dir(c.Source), target))
			if dst, ok := shipped[repo]; ok {
				rel, err := filepath.Rel(path.Dir(c.Destination), strings.TrimSuffix(dst, ".gz"))
				if err == nil && !strings.HasSuffix(dst, ".gz") {
					return []byte("](" + rel + frag + ")")
				}
			}
			return []byte("](" + info.Homepage + "/blob/main/" + filepath.ToSlash(repo) + frag + ")")
		})
		c.Source = filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(c.Destination)))
		if err := os.WriteFile(c.Source, text, 0o644); err != nil {
			return err
		}
	}
	return nil
}
