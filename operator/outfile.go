package operator

import (
	"fmt"
	"os"
	"path/filepath"
)

// outFile is a file written beside its final path and renamed there only when complete,
// so a failed or cancelled run leaves no half-written payload behind.
type outFile struct {
	*os.File
	path string
}

func createOut(path string) (*outFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("out-payload: %w", err)
	}
	return &outFile{File: f, path: path}, nil
}

// commit syncs the file, makes it world-readable (it is published, not secret) and
// renames it into place.
func (o *outFile) commit() error {
	tmp := o.Name()
	err := o.Sync()
	if cerr := o.Close(); err == nil {
		err = cerr
	}
	o.File = nil
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, o.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("out-payload %s: %w", o.path, err)
	}
	return nil
}

// abort removes the file unless it was committed; deferring it is always safe.
func (o *outFile) abort() {
	if o.File != nil {
		o.Close()
		os.Remove(o.Name())
		o.File = nil
	}
}
