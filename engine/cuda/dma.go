package cuda

import (
	"fmt"
	"unsafe"
)

// cudaDMA is dmaEngine on two streams of a context, with one event per
// slot, page-locking each slot of the ring on its first use. Its methods
// run on threads where the context is current, each slot's (and each
// stream's) on one thread at a time.
type cudaDMA struct {
	c       *Context
	ring    *stagingRing
	streams []*Stream
	events  []*Event
	// prepared and registered: each slot's, written only by the thread
	// that fills the slot (slots are not shared between readers).
	prepared, registered []bool
}

// newCudaDMA makes the engine's streams (at least two) and an event per
// slot of the ring.
func newCudaDMA(c *Context, ring *stagingRing, streams int) (*cudaDMA, error) {
	slots := ring.slots()
	d := &cudaDMA{c: c, ring: ring, prepared: make([]bool, slots), registered: make([]bool, slots)}
	for range max(2, streams) {
		s, err := c.NewStream()
		if err != nil {
			d.destroy()
			return nil, err
		}
		d.streams = append(d.streams, s)
	}
	for i := 0; i < slots; i++ {
		e, err := c.NewEvent()
		if err != nil {
			d.destroy()
			return nil, err
		}
		d.events = append(d.events, e)
	}
	return d, nil
}

// prepare page-locks the slot, so its copies run at full bandwidth and
// asynchronously; if the driver refuses, the copies still work from
// pageable memory (slower), and allRegistered says so.
func (d *cudaDMA) prepare(slot int) error {
	b := d.ring.slot(slot)
	d.registered[slot] = d.c.HostRegister(unsafe.Pointer(&b[0]), len(b), false) == nil
	d.prepared[slot] = true
	return nil
}

// allRegistered reports whether every slot used was page-locked (once
// the upload's threads are done).
func (d *cudaDMA) allRegistered() bool {
	for i, p := range d.prepared {
		if p && !d.registered[i] {
			return false
		}
	}
	return true
}

func (d *cudaDMA) copy(stream int, dst DevicePtr, src []byte) error {
	if stream < 0 || stream >= len(d.streams) {
		return fmt.Errorf("upload: copy on stream %d of %d (internal error)", stream, len(d.streams))
	}
	return d.streams[stream].CopyHtoDAsync(dst, unsafe.Pointer(&src[0]), len(src))
}

func (d *cudaDMA) fence(slot, stream int) error {
	if stream < 0 || stream >= len(d.streams) {
		return fmt.Errorf("upload: fence on stream %d of %d (internal error)", stream, len(d.streams))
	}
	return d.events[slot].Record(d.streams[stream])
}

func (d *cudaDMA) wait(slot int) error { return d.events[slot].Synchronize() }

func (d *cudaDMA) destroy() {
	for d.releaseNext() {
	}
}

// releaseNext releases the next of the engine's resources — its streams
// and events together, then one page-locked slot at a time — and says
// whether there was one.
func (d *cudaDMA) releaseNext() bool {
	if d.streams != nil || d.events != nil {
		for _, s := range d.streams {
			s.Synchronize()
			s.Destroy()
		}
		d.streams = nil
		for _, e := range d.events {
			e.Destroy()
		}
		d.events = nil
		return true
	}
	for i, r := range d.registered {
		if r {
			b := d.ring.slot(i)
			d.c.HostUnregister(unsafe.Pointer(&b[0]))
			d.registered[i] = false
			return true
		}
	}
	return false
}

// pieces is how many releaseNext calls release the engine.
func (d *cudaDMA) pieces() int {
	n := 0
	if d.streams != nil || d.events != nil {
		n++
	}
	for _, r := range d.registered {
		if r {
			n++
		}
	}
	return n
}
