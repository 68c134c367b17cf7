package tokenizer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/treni-top/treni-top/engine/regfile"
)

// The binary cache holds everything parse derives from tokenizer.json as
// flat little-endian arrays, so a hit costs one file read, a checksum and a
// few slice headers instead of parsing 11 MB of JSON.
//
//	header: magic "TRNTOK\x00" + version byte, u32 crc32c(payload), u32 0, u64 len(payload)
//	payload: sections, each u64 length + bytes, padded to 8 bytes:
//	  meta JSON, pieces, pieceOff u32[], present u8[], merge slots u64[],
//	  merged id per rank u32[], byteID i32[256]
//
// A hit keeps the file's bytes as the tokenizer's tables (they are used in
// place), so the file is what the tokenizer holds: 4.8 MB for Qwen3.
const (
	cacheMagic   = "TRNTOK\x00\x03"
	cacheHeader  = 24
	cacheVersion = "3" // part of the key: a format change never reads old files
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// cacheKey is the hex SHA-256 of both files and the format version.
func cacheKey(tokJSON, cfgJSON []byte) string {
	h := sha256.New()
	h.Write([]byte("treni-top tokenizer cache v" + cacheVersion + "\x00"))
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(tokJSON)))
	h.Write(n[:])
	h.Write(tokJSON)
	h.Write(cfgJSON)
	return hex.EncodeToString(h.Sum(nil))
}

// writeCache stores t atomically (temporary file, then rename), so a
// concurrent reader sees the old state or the complete new file.
func writeCache(path string, t *Tokenizer) error {
	md := meta{Added: t.added, NFC: t.nfc, PreTokenizer: t.rawPre, IgnoreMerges: t.ignoreMerges, UnkID: t.unkID, FuseUnk: t.fuseUnk, MergeCount: t.mergeCount}
	mj, err := json.Marshal(md)
	if err != nil {
		return fmt.Errorf("tokenizer cache: %w", err)
	}
	var p []byte
	section := func(b []byte) {
		p = binary.LittleEndian.AppendUint64(p, uint64(len(b)))
		p = append(p, b...)
		for len(p)%8 != 0 {
			p = append(p, 0)
		}
	}
	u32s := func(v []uint32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], x)
		}
		return b
	}
	u64s := func(v []uint64) []byte {
		b := make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], x)
		}
		return b
	}
	section(mj)
	section([]byte(t.pieces))
	section(u32s(t.pieceOff))
	section(t.present)
	section(u64s(t.merges.slots))
	section(u32s(t.merges.ids))
	bid := make([]uint32, 256)
	for i, v := range t.byteID {
		bid[i] = uint32(v)
	}
	section(u32s(bid))

	hdr := make([]byte, cacheHeader, cacheHeader+len(p))
	copy(hdr, cacheMagic)
	binary.LittleEndian.PutUint32(hdr[8:], crc32.Checksum(p, crcTable))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(len(p)))
	out := append(hdr, p...)

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("tokenizer cache: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tok-*")
	if err != nil {
		return fmt.Errorf("tokenizer cache: %w", err)
	}
	_, werr := f.Write(out)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("tokenizer cache: %w", werr)
	}
	return nil
}

// errBadCache says a cache file is unusable; Load then parses the JSON
// and rewrites it.
var errBadCache = errors.New("tokenizer cache file is corrupt")

// readCache loads a cache file. Every length and offset is checked, so a
// corrupt or hostile file yields an error, never a panic.
func readCache(path string) (*Tokenizer, error) {
	data, err := regfile.ReadFile(path, maxCacheFile)
	if err != nil {
		return nil, err
	}
	return decodeCache(data)
}

func decodeCache(data []byte) (*Tokenizer, error) {
	if len(data) < cacheHeader || string(data[:8]) != cacheMagic {
		return nil, fmt.Errorf("%w: bad header", errBadCache)
	}
	plen := binary.LittleEndian.Uint64(data[16:])
	if plen != uint64(len(data)-cacheHeader) {
		return nil, fmt.Errorf("%w: truncated", errBadCache)
	}
	p := data[cacheHeader:]
	if crc32.Checksum(p, crcTable) != binary.LittleEndian.Uint32(data[8:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", errBadCache)
	}
	return decodePayload(p)
}

// decodePayload validates and maps the sections of a cache payload.
func decodePayload(p []byte) (*Tokenizer, error) {
	var secs [7][]byte
	for i := range secs {
		if len(p) < 8 {
			return nil, fmt.Errorf("%w: section %d missing", errBadCache, i)
		}
		n := binary.LittleEndian.Uint64(p)
		p = p[8:]
		if n > uint64(len(p)) {
			return nil, fmt.Errorf("%w: section %d overruns the file", errBadCache, i)
		}
		secs[i] = p[:n]
		pad := (n + 7) &^ 7
		if pad > uint64(len(p)) {
			pad = uint64(len(p))
		}
		p = p[pad:]
	}
	var md meta
	if err := json.Unmarshal(secs[0], &md); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadCache, err)
	}
	t := &Tokenizer{}
	t.pieces = bytesString(secs[1])
	var ok bool
	if t.pieceOff, ok = asU32(secs[2]); !ok {
		return nil, fmt.Errorf("%w: piece offsets", errBadCache)
	}
	t.present = secs[3]
	n := len(t.present)
	if len(t.pieceOff) != n+1 || !monotone(t.pieceOff, len(t.pieces)) {
		return nil, fmt.Errorf("%w: offsets do not match the pieces", errBadCache)
	}
	if t.merges.slots, ok = asU64(secs[4]); !ok {
		return nil, fmt.Errorf("%w: merge slots", errBadCache)
	}
	if t.merges.ids, ok = asU32(secs[5]); !ok {
		return nil, fmt.Errorf("%w: merged ids", errBadCache)
	}
	mids := t.merges.ids
	// Merged ids index the tables; check them once here rather than on
	// every lookup.
	for _, id := range mids {
		if id >= uint32(n) {
			return nil, fmt.Errorf("%w: merge id", errBadCache)
		}
	}
	size := len(t.merges.slots)
	if size == 0 || size&(size-1) != 0 {
		return nil, fmt.Errorf("%w: merge table size", errBadCache)
	}
	t.merges.mask = uint64(size - 1)
	if t.merges.idBits, t.merges.rankBits, ok = mergeBits(n, len(mids)); !ok {
		return nil, fmt.Errorf("%w: merge table widths", errBadCache)
	}
	free := false
	rankMask := uint64(1)<<t.merges.rankBits - 1
	for _, s := range t.merges.slots {
		if s == emptyKey {
			free = true // a full table would make lookups of absent pairs loop
			continue
		}
		if s&rankMask >= uint64(len(mids)) {
			return nil, fmt.Errorf("%w: merge rank", errBadCache)
		}
	}
	bid, ok := asU32(secs[6])
	if !ok || len(bid) != 256 || !free {
		return nil, fmt.Errorf("%w: byte table", errBadCache)
	}
	for i, v := range bid {
		t.byteID[i] = int32(v)
		if t.byteID[i] >= int32(n) || t.byteID[i] < -1 {
			return nil, fmt.Errorf("%w: byte table id", errBadCache)
		}
	}
	for _, a := range md.Added {
		if a.ID < 0 || int(a.ID) >= n {
			return nil, fmt.Errorf("%w: added token id", errBadCache)
		}
	}
	if md.UnkID >= int32(n) || md.UnkID < -1 {
		return nil, fmt.Errorf("%w: unk id", errBadCache)
	}
	if err := t.setMeta(md, nil, 0); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadCache, err)
	}
	return t, nil
}

func monotone(off []uint32, limit int) bool {
	prev := uint32(0)
	for _, o := range off {
		if o < prev {
			return false
		}
		prev = o
	}
	return int(prev) <= limit
}

// littleEndian reports whether the host stores integers little-endian,
// the cache's byte order, so sections can be used in place.
func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// bytesString views b as a string without copying; b is never written.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func asU32(b []byte) ([]uint32, bool) {
	if len(b)%4 != 0 {
		return nil, false
	}
	n := len(b) / 4
	if n == 0 {
		return []uint32{}, true
	}
	if littleEndian() && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), n), true
	}
	v := make([]uint32, n)
	for i := range v {
		v[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return v, true
}

func asU64(b []byte) ([]uint64, bool) {
	if len(b)%8 != 0 {
		return nil, false
	}
	n := len(b) / 8
	if n == 0 {
		return []uint64{}, true
	}
	if littleEndian() && uintptr(unsafe.Pointer(&b[0]))%8 == 0 {
		return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n), true
	}
	v := make([]uint64, n)
	for i := range v {
		v[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return v, true
}

// readFileBytes reads a whole file (a seam for tests).
func readFileBytes(path string) ([]byte, error) { return os.ReadFile(path) }

// statMemoPath names the memo file for the current (absolute path, size,
// modification time, inode, change time) of tokenizer.json and
// tokenizer_config.json, or "" when tokenizer.json cannot be stat'ed. Any
// write or replacement of either file changes its change time and so the
// memo's name; a stale memo is never read.
func statMemoPath(cacheDir, path, cfgPath string) string {
	h := sha256.New()
	for i, p := range []string{path, cfgPath} {
		abs, err := filepath.Abs(p)
		if err != nil {
			return ""
		}
		fi, err := os.Stat(p)
		if err != nil {
			if i == 0 {
				return ""
			}
			fmt.Fprintf(h, "%s\x00absent\x00", abs)
			continue
		}
		ino, ctime := statExtra(fi)
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\x00%d\x00", abs, fi.Size(), fi.ModTime().UnixNano(), ino, ctime)
	}
	return filepath.Join(cacheDir, hex.EncodeToString(h.Sum(nil))+".stat")
}

// writeMemo records key under the memo name; failures only cost the next
// load a hash.
func writeMemo(memo, key string) {
	if memo == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(memo), 0o755); err != nil {
		return
	}
	f, err := os.CreateTemp(filepath.Dir(memo), ".stat-*")
	if err != nil {
		return
	}
	_, werr := f.WriteString(key)
	if cerr := f.Close(); werr == nil && cerr == nil && os.Rename(f.Name(), memo) == nil {
		return
	}
	os.Remove(f.Name())
}

// validKey reports whether s is a hex SHA-256 (a memo's content).
func validKey(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
