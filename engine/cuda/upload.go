package cuda

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
)

// How the weights reach the device. Two paths, both measured on the lent
// H100 (docs/BENCHMARKS.md):
//
//   - UploadStaged (the default): reader goroutines pread the weight files
//     into a ring of page-locked staging slots while the copy engine drains
//     the filled ones over two streams. The mapping of the weight files is
//     never touched, so no page-table entry is built for 8 GB of weights
//     (the cost that held the mapped path to ~13 GB/s), the process's RSS
//     stays at the size of the ring, which is freed after the upload, and a
//     cold page cache is read by several readers at once, its first chunks
//     by a prefetch while the driver initialises (prefetch.go). Opt-in in-place
//     copiers (inplace.go) can take chunks from the other end of the
//     readers' queue and have the copy engine read them straight from the
//     page cache, through a mapping of their own page-locked in place: one
//     pass over host memory instead of three.
//   - UploadMapped: the mapping itself is cuMemHostRegister'd chunk by chunk
//     and copied from. Kept for comparison and as the fallback when the
//     files cannot be opened for reading (the mapping is then all there is).
//
// This file holds the modes and the staged upload's configuration. The
// copies are cut into reads by chunks.go; the staged pipeline (staged.go)
// reads them into the page-locked ring (ring.go) and copies them with the
// copy engine (dma.go); what it leaves behind is released in the
// background (staging.go). The mapped path is mapped.go.

// Upload modes of BackendOptions.Upload.
const (
	UploadStaged = "staged"
	UploadMapped = "mapped"
)

// UploadEnv overrides BackendOptions.Upload when set (staged or mapped), so
// benchmarks can compare the two paths on one binary.
const UploadEnv = "TRENI_CUDA_UPLOAD"

// Staging ring geometry: the default slot size (uploadConfig.slotMB), and
// with one copy loop (stageCopyLoop) the slots beyond one per reader that
// keep the copy engine busy while readers refill. With readers that
// enqueue their own copies, two slots of 8 MiB each uploaded a warm 4B-
// shaped checkpoint ~1 GB/s faster than two of 16 MiB on the lent H100,
// but read it from a cold page cache 5–10% slower (the disk serves larger
// reads better; docs/BENCHMARKS.md): the cold start from disk is the
// longer by ten times, so the slots stay 16 MiB.
const (
	stagingSlotBytes = 16 << 20
	stagingSlack     = 6
)

// uploadConfig is how the staged upload runs: readers that pread the
// weight files into the ring, in-place copiers (inplace.go) that register
// the files' mapping and copy from it beside the readers, and the
// copiers' unit (MiB taken, and registered, at a time).
type uploadConfig struct {
	readers, inPlace, unitMB int
	// populate has the copiers' mappings populated while the driver
	// initialises (prefault, inplace.go); only with in-place copiers.
	populate bool
	// ownCopies has each reader enqueue its own chunks' copies, on a
	// stream of its own, alternating between perReader slots of its own
	// (stageOwnCopies); otherwise one copy loop enqueues every copy and
	// hands the readers their chunks (stageCopyLoop). slotMB is the ring's
	// slot size.
	ownCopies         bool
	perReader, slotMB int
	// prefetch has the front of the files read into the page cache while
	// the driver initialises (coldPrefetch); only with a cold page cache.
	prefetch bool
}

// ringSlots is how many slots the staging ring needs for this config.
func (u uploadConfig) ringSlots() int {
	if u.ownCopies {
		// A reader's worth at least: the one the in-place copiers fall
		// back to when they cannot map the files.
		return max(1, u.readers) * u.perReader
	}
	return u.readers + stagingSlack
}

// ringReaders is how many readers a ring of n slots serves.
func (u uploadConfig) ringReaders(n int) int {
	if u.ownCopies {
		return min(u.readers, n/max(1, u.perReader))
	}
	return min(u.readers, n-stagingSlack)
}

// UploadReadersEnv and UploadInPlaceEnv override the staged upload's
// reader and in-place copier counts (a number; 0 in-place copiers means
// readers only, 0 readers in-place copiers only), so benchmarks can sweep
// them on one binary; UploadInPlaceUnitEnv (inplace.go) the copiers'
// unit, UploadPopulateEnv (0 or 1) whether their mappings are populated
// ahead. A cold page cache ignores them (see defaultUploadConfig).
const (
	UploadReadersEnv = "TRENI_CUDA_UPLOAD_READERS"
	UploadInPlaceEnv = "TRENI_CUDA_UPLOAD_INPLACE"
)

// UploadColdReadersEnv overrides how many readers read a cold page cache
// (a count from 1 to 64; coldReaders by default), so that storage's best
// queue depth can be measured on one binary (scripts/gpu-upload-sweep.sh
// with COLD=1). The ring is mapped before the residency is known, for the
// warm readers, so a cold upload runs at most as many readers as a warm
// one (uploadConfig.ringReaders).
const UploadColdReadersEnv = "TRENI_CUDA_UPLOAD_COLD_READERS"

// UploadFeedEnv chooses who enqueues the staged upload's copies: "reader"
// (each reader its own; the default) or "loop" (one copy loop beside the
// readers); UploadSlotsEnv the slots each reader alternates between (with
// "reader") and UploadSlotEnv the slot size in MiB. Warm or cold.
const (
	UploadFeedEnv  = "TRENI_CUDA_UPLOAD_FEED"
	UploadSlotsEnv = "TRENI_CUDA_UPLOAD_SLOTS_PER_READER"
	UploadSlotEnv  = "TRENI_CUDA_UPLOAD_SLOT_MB"
)

// defaultUploadConfig: from a warm page cache one reader copies at
// 4–5 GB/s, so approaching the 55 GB/s of a pinned H2D copy takes a dozen;
// two cores stay free for the backend's thread (kernel load, warm-up) and
// the copy thread. On the lent H100 host (16 cores) 8 readers reached
// 31 GB/s and 14 reached 35 GB/s. From storage (cold), more readers only
// interleave more streams on the disk: coldReaders read (8 read the
// 4B-shaped checkpoint at the disk's measured rate; 14 were not
// consistently faster in the eighteenth session's paired rounds), and a
// prefetch reads the front of the files while the driver initialises
// (coldPrefetch: the first token 187 ms sooner with 8 readers, 355 with
// 14, medians of 8 paired rounds on the lent H100; see
// docs/BENCHMARKS.md).
//
// In-place copiers are opt-in (UploadInPlaceEnv). On the 8 GB checkpoint,
// two of them, with the readers two cores fewer each and their mappings
// populated ahead, took the upload from 33–35 to 39–41 GB/s and the first
// token 11–55 ms sooner (on one host of nine, nothing). But until the
// background releases it (releaseInPlaceStep: at the server's first
// pause, or stagingForceAfter after it could start under steady load) the
// checkpoint's page cache stays page-locked and counts in the RSS: 8.7 GB
// instead of 0.65 when the server is healthy, and still in the RSS when a
// short session ends; and on the 1.2 GB checkpoint they lost
// (docs/BENCHMARKS.md).
func defaultUploadConfig(cold bool) uploadConfig {
	u := uploadConfig{readers: maxReaders(), unitMB: defaultInPlaceUnitMB, populate: true,
		ownCopies: true, perReader: 2, slotMB: stagingSlotBytes >> 20}
	if cold {
		u.readers, u.populate, u.prefetch = coldReaders, false, true
	}
	return u
}

// maxReaders is the most readers a warm upload runs by default (the ring
// holds perReader slots for each; ringSlots).
func maxReaders() int { return min(16, max(4, runtime.NumCPU()-2)) }

const coldReaders = 8

// resolveUploadConfig is defaultUploadConfig(cold) with the environment's
// overrides for a warm page cache. In-place copiers asked for without a
// reader count take two readers' cores each.
func resolveUploadConfig(cold bool) (uploadConfig, error) {
	t := defaultUploadConfig(cold)
	type count struct {
		env         string
		v           *int
		lo, hi, mul int
	}
	counts := func(cs ...count) error {
		for _, o := range cs {
			s := os.Getenv(o.env)
			if s == "" {
				continue
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < o.lo || n > o.hi || n%o.mul != 0 {
				return fmt.Errorf("cuda: %s=%q is not a count from %d to %d in steps of %d", o.env, s, o.lo, o.hi, o.mul)
			}
			*o.v = n
		}
		return nil
	}
	// flag reads a 0/1 setting into v; unset keeps the default.
	flag := func(env string, v *bool) error {
		switch s := os.Getenv(env); s {
		case "":
		case "0", "1":
			*v = s == "1"
		default:
			return fmt.Errorf("cuda: %s=%q is not 0 or 1", env, s)
		}
		return nil
	}
	// The ring's shape, warm or cold.
	if err := counts(count{UploadSlotEnv, &t.slotMB, 1, 256, 1}, count{UploadSlotsEnv, &t.perReader, 1, 8, 1}); err != nil {
		return t, err
	}
	switch v := os.Getenv(UploadFeedEnv); v {
	case "", "reader", "loop":
		t.ownCopies = v != "loop"
	default:
		return t, fmt.Errorf("cuda: %s=%q is not reader or loop", UploadFeedEnv, v)
	}
	if cold {
		if err := flag(ColdPrefetchEnv, &t.prefetch); err != nil {
			return t, err
		}
		return t, counts(count{UploadColdReadersEnv, &t.readers, 1, 64, 1})
	}
	t.unitMB = max(1, t.unitMB/t.slotMB) * t.slotMB // a whole number of slots
	if err := counts(count{UploadReadersEnv, &t.readers, 0, 64, 1}, count{UploadInPlaceEnv, &t.inPlace, 0, 16, 1},
		count{UploadInPlaceUnitEnv, &t.unitMB, t.slotMB, 4096, t.slotMB}); err != nil {
		return t, err
	}
	if t.inPlace > 0 && os.Getenv(UploadReadersEnv) == "" {
		t.readers = max(4, t.readers-2*t.inPlace)
	}
	if err := flag(UploadPopulateEnv, &t.populate); err != nil {
		return t, err
	}
	t.populate = t.populate && t.inPlace > 0
	if t.readers+t.inPlace == 0 {
		return t, fmt.Errorf("cuda: %s=0 and %s=0 leave no thread to upload the weights", UploadReadersEnv, UploadInPlaceEnv)
	}
	return t, nil
}
