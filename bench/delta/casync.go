package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// casyncChunkSize is casync's --chunk-size: 64 KiB on average, its default
// spread (a quarter to four times the average).
const casyncChunkSize = "16384:65536:262144"

// casyncStore maps the chunk IDs of a casync store (STORE/xxxx/ID.cacnk) to
// the size of their compressed file.
type casyncStore map[string]int64

// readCasyncStore lists a store's chunks.
func readCasyncStore(dir string) (casyncStore, error) {
	s := casyncStore{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		id, ok := strings.CutSuffix(e.Name(), ".cacnk")
		if !ok {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		s[id] = info.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("casync store %s: %w", dir, err)
	}
	return s, nil
}

// casyncFetch is what `casync extract --seed=OLD` fetches for NEW: the
// chunks of NEW's store that OLD's store lacks (a chunk's ID is the hash
// of its uncompressed bytes, so OLD, chunked as the seed, yields exactly
// the chunks in OLD's store), by the size of their compressed files.
type casyncFetch struct {
	Chunks, NewChunks int
	Bytes             int64
}

func casyncMissing(old, new casyncStore) casyncFetch {
	f := casyncFetch{Chunks: len(new)}
	for id, n := range new {
		if _, ok := old[id]; !ok {
			f.NewChunks++
			f.Bytes += n
		}
	}
	return f
}

// casyncPeer makes a store of each image and counts what NEW needs beyond
// OLD, index included. The stores are under dir.
func casyncPeer(ctx context.Context, r runner, dir string, p imagePair) (casyncFetch, int64, error) {
	stores := map[string]string{}
	var index int64
	for side, img := range map[string]string{"old": p.old, "new": p.new} {
		store := filepath.Join(dir, p.name+"-"+side+".castr")
		caibx := filepath.Join(dir, p.name+"-"+side+".caibx")
		if err := os.RemoveAll(store); err != nil {
			return casyncFetch{}, 0, err
		}
		if err := r.run(ctx, 30*time.Minute, "casync", "make", "--store="+store, "--chunk-size="+casyncChunkSize,
			"--compression=zstd", caibx, img); err != nil {
			return casyncFetch{}, 0, err
		}
		stores[side] = store
		if side == "new" {
			st, err := os.Stat(caibx)
			if err != nil {
				return casyncFetch{}, 0, err
			}
			index = st.Size()
		}
	}
	old, err := readCasyncStore(stores["old"])
	if err != nil {
		return casyncFetch{}, 0, err
	}
	new, err := readCasyncStore(stores["new"])
	if err != nil {
		return casyncFetch{}, 0, err
	}
	return casyncMissing(old, new), index, nil
}
