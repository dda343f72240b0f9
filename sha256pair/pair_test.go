package sha256pair

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
)

// Every path hashes as crypto/sha256 does: a continuous digest written
// to with Write and Both, part-way through a block when Both starts, and a
// fresh one for each piece — with the SHA extensions and without.
func TestMatchesCryptoSHA256(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 1<<16)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for _, generic := range []bool{false, true} {
		if !generic && !hasSHA {
			continue
		}
		for trial := range 400 {
			// a: a continuous hash of pieces; b: restarted for each piece.
			a, ref := New(), sha256.New()
			pre := r.IntN(200)
			withGeneric(generic, func() { a.Write(data[:pre]) })
			ref.Write(data[:pre])
			off := pre
			for range 1 + r.IntN(6) {
				n := r.IntN(3000)
				if trial%7 == 0 {
					n = r.IntN(130)
				}
				if off+n > len(data) {
					break
				}
				p := data[off : off+n]
				b := New()
				withGeneric(generic, func() { Both(&a, &b, p) })
				ref.Write(p)
				if got, want := b.Sum(), sha256.Sum256(p); got != want {
					t.Fatalf("generic=%v trial %d: piece of %d bytes: %x, want %x", generic, trial, n, got, want)
				}
				off += n
			}
			if got, want := a.Sum(), [Size]byte(ref.Sum(nil)); got != want {
				t.Fatalf("generic=%v trial %d: %d bytes: %x, want %x", generic, trial, off, got, want)
			}
		}
	}
}

func withGeneric(on bool, f func()) {
	if !on {
		f()
		return
	}
	was := hasSHA
	setSHA(false)
	defer setSHA(was)
	f()
}

// A Digest copied is a snapshot: going back to it forgets what came after.
func TestCopyIsSnapshot(t *testing.T) {
	a := New()
	a.Write([]byte("the image so far"))
	saved := a
	b := New()
	Both(&a, &b, []byte("a chunk found wrong"))
	a = saved
	a.Write([]byte(", then the chunk fetched again"))
	if got, want := a.Sum(), sha256.Sum256([]byte("the image so far, then the chunk fetched again")); got != want {
		t.Fatalf("%x, want %x", got, want)
	}
}

func BenchmarkTwoPasses(b *testing.B) {
	p := make([]byte, 64<<10)
	b.SetBytes(int64(len(p)))
	h := sha256.New()
	for b.Loop() {
		sha256.Sum256(p)
		h.Write(p)
	}
}

func BenchmarkBoth(b *testing.B) {
	p := make([]byte, 64<<10)
	b.SetBytes(int64(len(p)))
	img := New()
	for b.Loop() {
		c := New()
		Both(&img, &c, p[1:])
	}
}

func BenchmarkOne(b *testing.B) {
	p := make([]byte, 64<<10)
	b.SetBytes(int64(len(p)))
	img := New()
	for b.Loop() {
		img.Write(p)
	}
}

func setSHA(on bool) { hasSHA = on }

// FuzzBoth: any split of any bytes hashes as crypto/sha256 does, into a
// digest part-way through and into a fresh one.
func FuzzBoth(f *testing.F) {
	f.Add([]byte("abc"), uint8(0), uint16(64))
	f.Add(make([]byte, 300), uint8(63), uint16(129))
	f.Fuzz(func(t *testing.T, data []byte, pre uint8, cut uint16) {
		p := min(int(pre), len(data))
		q := min(p+int(cut), len(data))
		a := New()
		a.Write(data[:p])
		b := New()
		Both(&a, &b, data[p:q])
		a.Write(data[q:])
		if got, want := a.Sum(), sha256.Sum256(data); got != want {
			t.Fatalf("whole: %x, want %x", got, want)
		}
		if got, want := b.Sum(), sha256.Sum256(data[p:q]); got != want {
			t.Fatalf("piece: %x, want %x", got, want)
		}
	})
}

// TestAssemblyIsGenerated: block_amd64.s is what gen.go writes, so that a
// change to the generator is not left out of the code it describes.
func TestAssemblyIsGenerated(t *testing.T) {
	// go test puts its own go command first on PATH.
	out, err := exec.Command("go", "run", "gen.go").Output()
	if err != nil {
		t.Fatalf("go run gen.go: %v", err)
	}
	have, err := os.ReadFile("block_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, have) {
		t.Fatal("block_amd64.s is not what gen.go writes: go run gen.go > block_amd64.s")
	}
}
