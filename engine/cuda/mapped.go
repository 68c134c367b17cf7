package cuda

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"unsafe"
)

// uploadChunk is the mapped path's unit: the stretch of a file's mapping
// registered, copied from and unregistered at a time.
const uploadChunk = 64 << 20

// copyRegistered copies jobs grouped by file through page-aligned chunks
// of the mapping, each registered with cuMemHostRegister (read-only) before
// its copies are enqueued and unregistered once they finish. When
// registration is refused (an old driver, a locked-memory limit), it falls
// back to pageable copies and says so in the result. It stops before the
// next chunk once ctx ends.
func (b *Backend) copyRegistered(ctx context.Context, jobs []copyJob) (chunks int, registered bool, err error) {
	if len(jobs) == 0 {
		return 0, false, nil
	}
	var streams [2]*Stream
	for i := range streams {
		if streams[i], err = b.c.NewStream(); err != nil {
			return 0, false, err
		}
		defer streams[i].Destroy()
	}
	addr := func(j copyJob) uintptr { return uintptr(unsafe.Pointer(&j.src[0])) }
	byFile := map[string][]copyJob{}
	var files []string
	for _, j := range jobs {
		if _, ok := byFile[j.file]; !ok {
			files = append(files, j.file)
		}
		byFile[j.file] = append(byFile[j.file], j)
	}
	const page = 4096
	type pending struct {
		p  unsafe.Pointer
		ev *Event
	}
	var inflight []pending
	retire := func(all bool) error {
		for len(inflight) > 0 && (all || len(inflight) >= 2) {
			pd := inflight[0]
			inflight = inflight[1:]
			if err := pd.ev.Synchronize(); err != nil {
				return err
			}
			pd.ev.Destroy()
			if pd.p != nil {
				if err := b.c.HostUnregister(pd.p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	registered = true
	for _, f := range files {
		js := byFile[f]
		sort.Slice(js, func(a, c int) bool { return addr(js[a]) < addr(js[c]) })
		first := js[0]
		lo := addr(first) &^ (page - 1)
		base := unsafe.Add(unsafe.Pointer(&first.src[0]), -int(addr(first)-lo))
		last := js[len(js)-1]
		hi := (addr(last) + uintptr(len(last.src)) + page - 1) &^ (page - 1)
		ji := 0
		for cs := lo; cs < hi; cs += uploadChunk {
			ce := min(cs+uploadChunk, hi)
			if err := ctx.Err(); err != nil {
				return chunks, registered, errors.Join(fmt.Errorf("upload weights: %w", err), retire(true))
			}
			if err := retire(false); err != nil {
				return chunks, registered, err
			}
			cp := unsafe.Add(base, int(cs-lo))
			reg := registered
			if reg {
				if err := b.c.HostRegister(cp, int(ce-cs), true); err != nil {
					// Fall back to pageable copies for the rest.
					registered, reg = false, false
				}
			}
			s := streams[chunks%2]
			for k := ji; k < len(js); k++ {
				a, e := addr(js[k]), addr(js[k])+uintptr(len(js[k].src))
				if a >= ce {
					break
				}
				from, to := max(a, cs), min(e, ce)
				if from < to {
					src := unsafe.Pointer(&js[k].src[from-a])
					if err := s.CopyHtoDAsync(js[k].dst+DevicePtr(from-a), src, int(to-from)); err != nil {
						return chunks, registered, fmt.Errorf("cuda: upload weights: %w", err)
					}
				}
				if e <= ce && k == ji {
					ji++
				}
			}
			ev, err := b.c.NewEvent()
			if err != nil {
				return chunks, registered, err
			}
			if err := ev.Record(s); err != nil {
				return chunks, registered, err
			}
			var p unsafe.Pointer
			if reg {
				p = cp
			}
			inflight = append(inflight, pending{p, ev})
			chunks++
		}
	}
	return chunks, registered, retire(true)
}
