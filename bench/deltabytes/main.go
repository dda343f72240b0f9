// Command deltabytes says where the bytes of otad's delta from one image to
// another go (issue 30): by how each chunk of the new image is made (held,
// a delta against neighbours, a delta against its own file, fetched whole) and
// by what it holds (ELF files, compressed files, text, other files, file
// system metadata), with the files that cost most.
//
//	go run ./bench/deltabytes -old OLD.img -new NEW.img [-index-cache FILE] [-top 25]
//
// It chunks NEW as `otactl sign --chunked` does (cdc, 64 KiB, zstd level 19;
// -index-cache keeps that index for the next run) and builds the deltas as
// `--delta-from OLD` does, with the file maps of ext4 images.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

func main() { cli.Tool("deltabytes", run) }

type options struct {
	old, new, cache string
	top             int
	check           bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o options
	fs := cli.NewFlagSet("deltabytes", "-old OLD -new NEW [flags]", stderr)
	fs.StringVar(&o.old, "old", "", "the older image (required)")
	fs.StringVar(&o.new, "new", "", "the new image (required)")
	fs.StringVar(&o.cache, "index-cache", "", "keep the new image's index in this file, and read it from there next time")
	fs.IntVar(&o.top, "top", 25, "list this many files that cost most")
	fs.BoolVar(&o.check, "check", false, "then decode every delta against OLD as a device does, checking each chunk, and say the CPU time it took (run under taskset -c 0 for one core)")
	if err := cli.ParseNone(fs, args); err != nil {
		return err
	}
	if o.old == "" || o.new == "" {
		return cli.Usagef("-old and -new are required")
	}
	oldF, err := os.Open(o.old)
	if err != nil {
		return err
	}
	defer oldF.Close()
	newF, err := os.Open(o.new)
	if err != nil {
		return err
	}
	defer newF.Close()
	x, err := index(ctx, newF, o.cache)
	if err != nil {
		return err
	}
	oldSize, _ := oldF.Seek(0, io.SeekEnd)
	newMap, err := payload.ReadFileMap(newF, x.ImageSize())
	if err != nil {
		return err
	}
	oldMap, err := payload.ReadFileMap(oldF, oldSize)
	if err != nil {
		return err
	}
	t := newTally()
	var deltas bytes.Buffer
	res, err := payload.BuildDelta(ctx, oldF, oldSize, newF, x, &deltas,
		payload.WithFiles(oldMap, newMap), payload.WithReport(func(c payload.ChunkReport) {
			kind, path := newMap.KindAt(newF, c.Offset, int64(c.Length))
			t.add(c, kind, path)
		}))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fetch %d bytes: index %d, delta index %d, deltas %d, whole %d (%d chunks with deltas, %d by file, %d binary diffs)\n",
		res.Fetch(x), len(x.Bytes()), len(res.Index), res.DeltasSize, res.FullStored, res.Count, res.ByFile, res.ByDiff)
	t.print(stdout, o.top)
	if o.check {
		return check(res, x, deltas.Bytes(), oldF, stdout)
	}
	return nil
}

// check decodes every delta of res against old, as a device does, and says the
// CPU time it took by method.
func check(res *payload.DeltaResult, x *payload.Index, deltas []byte, old io.ReaderAt, w io.Writer) error {
	d, err := payload.ParseDelta(res.Index, res.Expect(), x, "delta")
	if err != nil {
		return err
	}
	dec, err := payload.NewDeltaDecoder(x)
	if err != nil {
		return err
	}
	defer dec.Close()
	var took [2]time.Duration
	var count [2]int
	var bytes [2]int64
	for k := range d.Count() {
		dc := d.At(k)
		o := dc.Offset - int64(len(res.Index))
		t0 := cpuTime()
		b, err := dec.Decode(dc, deltas[o:o+int64(dc.Length)], old)
		if err != nil {
			return fmt.Errorf("record %d: %w", k, err)
		}
		took[dc.Method] += cpuTime() - t0
		count[dc.Method]++
		bytes[dc.Method] += int64(len(b))
	}
	for m, name := range []string{"zstd deltas", "binary diffs"} {
		fmt.Fprintf(w, "decoded %d %s (%d bytes of chunks, each checked): %.2fs CPU\n", count[m], name, bytes[m], took[m].Seconds())
	}
	return nil
}

// cpuTime is the CPU time the process used so far.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// tally counts bytes and chunks by how and kind, and bytes by file.
type tally struct {
	bytes, chunks [payload.HowWhole + 1][payload.KindOtherFile + 1]int64
	files         map[string]int64
}

func newTally() *tally { return &tally{files: map[string]int64{}} }

func (t *tally) add(c payload.ChunkReport, kind payload.FileKind, path string) {
	t.bytes[c.How][kind] += c.Bytes
	t.chunks[c.How][kind]++
	if path == "" {
		path = "(metadata)"
	}
	t.files[fmt.Sprintf("%s [%s, %s]", path, kind, c.How)] += c.Bytes
}

func (t *tally) print(w io.Writer, top int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "bytes (chunks)\t")
	for k := range payload.KindOtherFile + 1 {
		fmt.Fprintf(tw, "%s\t", k)
	}
	fmt.Fprint(tw, "all\t\n")
	var col [payload.KindOtherFile + 1]int64
	for h := range payload.HowWhole + 1 {
		fmt.Fprintf(tw, "%s\t", h)
		var row int64
		for k := range col {
			fmt.Fprintf(tw, "%d (%d)\t", t.bytes[h][k], t.chunks[h][k])
			row += t.bytes[h][k]
			col[k] += t.bytes[h][k]
		}
		fmt.Fprintf(tw, "%d\t\n", row)
	}
	fmt.Fprint(tw, "all\t")
	var all int64
	for _, v := range col {
		fmt.Fprintf(tw, "%d\t", v)
		all += v
	}
	fmt.Fprintf(tw, "%d\t\n", all)
	tw.Flush()
	type kv struct {
		k string
		v int64
	}
	var l []kv
	for k, v := range t.files {
		l = append(l, kv{k, v})
	}
	slices.SortFunc(l, func(a, b kv) int { return cmp.Compare(b.v, a.v) })
	for _, e := range l[:min(top, len(l))] {
		fmt.Fprintf(w, "%10d  %s\n", e.v, e.k)
	}
}

// cached is an index as -index-cache keeps it.
type cached struct {
	Index  []byte
	Expect payload.Expect
}

// index chunks the image as otactl sign --chunked does, or reads the index
// kept in cache.
func index(ctx context.Context, img *os.File, cache string) (*payload.Index, error) {
	if b, err := os.ReadFile(cache); cache != "" && err == nil {
		var c cached
		if err := json.Unmarshal(b, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", cache, err)
		}
		return payload.ParseIndex(c.Index, c.Expect)
	} else if cache != "" && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	res, err := payload.Build(ctx, io.NewSectionReader(img, 0, 1<<62), io.Discard,
		payload.Options{Chunking: ota.ChunkingCDC, Level: 19})
	if err != nil {
		return nil, err
	}
	if cache != "" {
		b, _ := json.Marshal(cached{res.Index, res.Expect()})
		if err := os.WriteFile(cache, b, 0o644); err != nil {
			return nil, err
		}
	}
	return payload.ParseIndex(res.Index, res.Expect())
}
