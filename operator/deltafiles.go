package operator

import (
	"fmt"
	"io"
	"os"

	"github.com/otad/otad/payload"
)

// fileMap is the file map of the ext4 image f (named name), for file-aware deltas,
// or nil: an image that is not ext4, or one the reader refuses (said on stderr: the
// deltas are then made without it, as for any other image).
func fileMap(f *os.File, name string, stderr io.Writer) *payload.FileMap {
	st, err := f.Stat()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v: deltas without its file map\n", name, err)
		return nil
	}
	m, err := payload.ReadFileMap(f, st.Size())
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v: deltas without its file map\n", name, err)
		return nil
	}
	return m
}

// byFile says how many deltas read the old bytes of their own files, and how
// many are binary diffs.
func byFile(r *payload.DeltaResult) string {
	switch {
	case r.ByFile == 0:
		return ""
	case r.ByDiff == 0:
		return fmt.Sprintf(" (%d against their files' old bytes)", r.ByFile)
	}
	return fmt.Sprintf(" (%d against their files' old bytes; %d binary diffs)", r.ByFile, r.ByDiff)
}
