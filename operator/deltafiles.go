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

// byFile says how many deltas read the old bytes of their own files.
func byFile(r *payload.DeltaResult) string {
	if r.ByFile == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d against their files' old bytes)", r.ByFile)
}
