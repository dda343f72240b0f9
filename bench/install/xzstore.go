package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// writeStoredXZ writes the file at src as an xz stream (one block, CRC32
// check) of LZMA2 uncompressed chunks with a 2 MiB dictionary: what an xz
// encoder writes for incompressible data such as the bench's random image,
// in a second rather than the minutes xz(1) spends finding no match.
func writeStoredXZ(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("xz payload: %w", err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("xz payload: %w", err)
	}
	defer out.Close()
	w := bufio.NewWriterSize(out, ioChunk)
	le32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	// Stream header: magic, flags (CRC32 check), CRC32 of the flags.
	flags := []byte{0, 1}
	w.Write([]byte{0xfd, '7', 'z', 'X', 'Z', 0})
	w.Write(flags)
	w.Write(le32(crc32.ChecksumIEEE(flags)))
	// Block header: size/4-1, flags (one filter), LZMA2 (0x21) with one
	// property byte (dictionary 2 MiB: 2^(11+18/2)... property 18), padding, CRC32.
	bh := []byte{0, 0x00, 0x21, 0x01, 18, 0, 0, 0}
	bh[0] = byte((len(bh)+4)/4 - 1)
	w.Write(bh)
	w.Write(le32(crc32.ChecksumIEEE(bh)))
	check := crc32.NewIEEE()
	buf := make([]byte, 64<<10)
	var unpadded, size int64 = int64(len(bh) + 4), 0
	for first := true; ; first = false {
		n, err := io.ReadFull(in, buf)
		if n > 0 {
			ctl := byte(2)
			if first {
				ctl = 1 // uncompressed chunk, dictionary reset
			}
			w.Write([]byte{ctl, byte((n - 1) >> 8), byte(n - 1)})
			w.Write(buf[:n])
			check.Write(buf[:n])
			unpadded += int64(3 + n)
			size += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return fmt.Errorf("xz payload: %w", err)
		}
	}
	w.Write([]byte{0}) // end of LZMA2 data
	unpadded++
	w.Write(make([]byte, (4-unpadded%4)%4))
	w.Write(le32(check.Sum32()))
	unpadded += 4
	// Index: one record (unpadded size, uncompressed size), padding, CRC32.
	idx := []byte{0, 1}
	idx = binary.AppendUvarint(idx, uint64(unpadded))
	idx = binary.AppendUvarint(idx, uint64(size))
	idx = append(idx, make([]byte, (4-len(idx)%4)%4)...)
	idx = append(idx, le32(crc32.ChecksumIEEE(idx))...)
	w.Write(idx)
	// Stream footer: CRC32 of backward size and flags, backward size, flags, magic.
	back := append(le32(uint32(len(idx)/4-1)), flags...)
	w.Write(le32(crc32.ChecksumIEEE(back)))
	w.Write(back)
	w.Write([]byte{'Y', 'Z'})
	if err := w.Flush(); err != nil {
		return fmt.Errorf("xz payload: %w", err)
	}
	return out.Close()
}
