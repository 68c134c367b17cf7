package sessions

import (
	"time"

	"github.com/treni-top/treni-top/trace/serverlog"
)

// An import runs on three goroutines: one reads the log and prepares its
// lines (readAhead: the lines cut from blocks, cleaned, their collectors'
// prefixes stripped, the built-in engine's stage lines read, the rules'
// texts looked for), one places and parses them and orders the events
// (runImport), one encodes and writes the events (eventWriter). Each step
// needs only its own state, so the three share the machine's cores;
// bounded channels of batches join them, so memory does not grow with the
// log.

// preparedLine is a line as readAhead hands it on.
type preparedLine struct {
	text string              // the cleaned line (logReader)
	u    serverlog.Unwrapped // its collectors' prefixes stripped
	pre  serverlog.Prepared  // read ahead of the parser
}

// lineBatch is how many lines go from the reader to the parser at once.
const lineBatch = 512

// readAhead reads and prepares lines on a goroutine of its own. Its owner
// (runImport) takes batches from next until it returns false, and calls
// stop once it is done with it, early or not; stop waits for the
// goroutine.
type readAhead struct {
	work chan []preparedLine
	free chan []preparedLine
	quit chan struct{}
	done chan struct{}
	lr   *logReader
	err  error // the reader's error, once work is closed
}

// startReadAhead starts reading lr's lines after those already read,
// unwrapping them against ref and preparing them for a parser of kind.
func startReadAhead(lr *logReader, ref time.Time, kind serverlog.Kind) *readAhead {
	ra := &readAhead{work: make(chan []preparedLine, 4), free: make(chan []preparedLine, 6), quit: make(chan struct{}), done: make(chan struct{}), lr: lr}
	for i := 0; i < 6; i++ {
		ra.free <- make([]preparedLine, 0, lineBatch)
	}
	go func() {
		defer close(ra.done)
		defer close(ra.work)
		pr := serverlog.NewPreparer(kind)
		for {
			var b []preparedLine
			select {
			case b = <-ra.free:
			case <-ra.quit:
				return
			}
			for len(b) < lineBatch {
				l, ok := lr.next()
				if !ok {
					break
				}
				u := serverlog.Unwrap(l, ref)
				b = append(b, preparedLine{text: l, u: u, pre: pr.Prepare(u.Line)})
			}
			if len(b) == 0 {
				ra.err = lr.err
				return
			}
			select {
			case ra.work <- b:
			case <-ra.quit:
				return
			}
		}
	}()
	return ra
}

// next is the next batch of lines; false once the log is read (err says
// whether it was read to its end). Hand the batch back with recycle.
func (ra *readAhead) next() ([]preparedLine, bool) {
	b, ok := <-ra.work
	return b, ok
}

// recycle hands a batch back for the reader to fill again.
func (ra *readAhead) recycle(b []preparedLine) {
	clear(b)
	ra.free <- b[:0]
}

// stop ends the reader and waits for it.
func (ra *readAhead) stop() {
	close(ra.quit)
	<-ra.done
}
