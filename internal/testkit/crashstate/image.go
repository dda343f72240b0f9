package crashstate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Image is what storage holds: names linked to inodes, and each inode's
// bytes. The slots are the inodes named slot/A and slot/B.
type Image struct {
	Names map[string]int
	Data  map[int][]byte
	owned map[int]bool   // inodes this image may change in place (copy on write)
	sums  map[int]uint64 // content hashes of inodes, kept until they change
}

func slotName(s string) string { return "slot/" + s }

// clone shares the bytes; the first write to an inode copies it.
func (img *Image) clone() *Image {
	return &Image{Names: maps.Clone(img.Names), Data: maps.Clone(img.Data), owned: map[int]bool{}, sums: maps.Clone(img.sums)}
}

// disown makes the image copy an inode before it next changes it: a clone
// shares its bytes.
func (img *Image) disown() { clear(img.owned) }

// File is the bytes name holds, nil when it does not exist.
func (img *Image) File(name string) []byte {
	id, ok := img.Names[name]
	if !ok {
		return nil
	}
	if b := img.Data[id]; b != nil {
		return b
	}
	return []byte{}
}

// apply does op on the image; n, when not negative, keeps only the first n
// bytes of a write (a torn write).
func (img *Image) apply(op Op, n int) {
	switch op.Kind {
	case OpCreate:
		// The inode is new: bytes it has already are writes that became
		// durable before its name did (Model.Walk applies those first).
		img.Names[op.Name] = op.Inode
		if _, ok := img.Data[op.Inode]; !ok {
			img.Data[op.Inode] = nil
			img.owned[op.Inode] = true
		}
	case OpWrite:
		data := op.Data
		if n >= 0 && n < len(data) {
			data = data[:n]
		}
		img.writeAt(op.Inode, op.Off, data)
	case OpRename:
		if id, ok := img.Names[op.Name]; ok {
			delete(img.Names, op.Name)
			img.Names[op.To] = id
		}
	case OpRemove:
		delete(img.Names, op.Name)
	}
}

func (img *Image) writeAt(inode int, off int64, b []byte) {
	d := img.Data[inode]
	end := int(off) + len(b)
	if !img.owned[inode] {
		d = append(make([]byte, 0, max(len(d), end)), d...)
		img.owned[inode] = true
	}
	if end > len(d) {
		d = append(d, make([]byte, end-len(d))...)
	}
	copy(d[off:], b)
	img.Data[inode] = d
	delete(img.sums, inode)
}

// key identifies the image's content; with agentOnly, the temporary files
// of durable replacements are left out (nothing ever reads them), so two
// states the agent and the bootloader cannot tell apart share a key.
func (img *Image) key(seed maphash.Seed, agentOnly bool) uint64 {
	img.hashes(seed)
	var h maphash.Hash
	h.SetSeed(seed)
	var n [8]byte
	for _, name := range slices.Sorted(maps.Keys(img.Names)) {
		if agentOnly && isTemp(name) {
			continue
		}
		sum := img.sums[img.Names[name]]
		h.WriteString(name)
		h.WriteByte(0)
		binary.LittleEndian.PutUint64(n[:], sum)
		h.Write(n[:])
	}
	return h.Sum64()
}

// hashes computes the content hash of every named inode that has none.
func (img *Image) hashes(seed maphash.Seed) {
	if img.sums == nil {
		img.sums = map[int]uint64{}
	}
	for name, id := range img.Names {
		if _, ok := img.sums[id]; !ok {
			img.sums[id] = maphash.Bytes(seed, img.File(name))
		}
	}
}

// isTemp is a durable replacement's temporary file (durable.WriteFileOn).
func isTemp(name string) bool {
	b := path.Base(name)
	return strings.HasPrefix(b, ".") && strings.Contains(b, ".tmp-")
}

// materialize writes the image's files (not the slots) under root, which
// holds nothing else of the image's afterwards.
func (img *Image) materialize(root string) error {
	for _, top := range []string{"state", "boot"} {
		if err := os.RemoveAll(filepath.Join(root, top)); err != nil {
			return err
		}
	}
	for name := range img.Names {
		if strings.HasPrefix(name, "slot/") || strings.HasPrefix(name, "etc/") {
			continue
		}
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, img.File(name), 0o600); err != nil {
			return err
		}
	}
	// Directories the device's software creates once and never removes.
	return os.MkdirAll(filepath.Join(root, "state"), 0o700)
}

// readImage reads root's files (state/, boot/, etc/) and the slots' bytes
// into an image.
func readImage(root string, slotBytes map[string][]byte) (*Image, error) {
	img := &Image{Names: map[string]int{}, Data: map[int][]byte{}, owned: map[int]bool{}, sums: map[int]uint64{}}
	id := 0
	add := func(name string, b []byte) {
		img.Names[name], img.Data[id] = id, b
		id++
	}
	for _, top := range []string{"boot", "etc", "state"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			add(filepath.ToSlash(rel), b)
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("read %s: %w", top, err)
		}
	}
	for _, s := range slices.Sorted(maps.Keys(slotBytes)) {
		add(slotName(s), bytes.Clone(slotBytes[s]))
	}
	return img, nil
}
