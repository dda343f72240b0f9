package main

import (
	"debug/elf"
	"fmt"
	"io"
)

// dynamicallyLinked says whether the ELF binary at path asks for a program
// interpreter (ld.so): built with cgo, as `go build` does by default where a
// C compiler is found, it maps the C library, whose pages (about 1.3 MiB on
// glibc) count in its peak RSS. The binary that ships is static (`make
// build`: CGO_ENABLED=0), so such a row is not the device's figure.
func dynamicallyLinked(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// warnDynamic prints a warning for each of bins that is dynamically linked;
// a file that is not ELF (a script) is not judged.
func warnDynamic(out io.Writer, bins []labelledBinary) {
	for _, b := range bins {
		if dyn, err := dynamicallyLinked(b.bin); err == nil && dyn {
			fmt.Fprintf(out, "warning: %s (%s) is dynamically linked: the C library's pages count in its peak RSS; build it as `make build` does (CGO_ENABLED=0)\n", b.bin, b.label)
		}
	}
}
