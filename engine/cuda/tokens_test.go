package cuda

import (
	"errors"
	"math"
	"testing"
	"unsafe"

	"github.com/treni-top/treni-top/engine/sched"
)

func TestCheckChoices(t *testing.T) {
	const V = 10
	bt := &sched.Batch{Seqs: []sched.SeqChunk{
		{SeqID: 1, Tokens: []int32{1}, WantLogits: true},
		{SeqID: 2, Tokens: []int32{2, 3}, WantLogits: false},
	}}
	ok := []sched.TokenChoice{{Temperature: 0.7, TopK: 5, TopP: 0.9}, {Temperature: -1}} // row 2 wants nothing: not checked
	toks := make([]int32, 2)
	if err := checkChoices(bt, ok, toks, nil, V); err != nil {
		t.Fatalf("valid call refused: %v", err)
	}
	if err := checkChoices(bt, ok, toks, [][]float32{make([]float32, V)}, V); err != nil {
		t.Fatalf("a logits list shorter than the batch is allowed: %v", err)
	}
	nan := float32(math.NaN())
	bad := map[string]struct {
		choice []sched.TokenChoice
		toks   []int32
		logits [][]float32
	}{
		"few choices":       {ok[:1], toks, nil},
		"few token slots":   {ok, toks[:1], nil},
		"extra logits rows": {ok, toks, make([][]float32, 3)},
		"short logits row":  {ok, toks, [][]float32{make([]float32, V-1)}},
		"negative temp":     {[]sched.TokenChoice{{Temperature: -0.1}, {}}, toks, nil},
		"NaN temp":          {[]sched.TokenChoice{{Temperature: nan}, {}}, toks, nil},
		"infinite temp":     {[]sched.TokenChoice{{Temperature: float32(math.Inf(1))}, {}}, toks, nil},
		"negative top_k":    {[]sched.TokenChoice{{Temperature: 1, TopK: -1}, {}}, toks, nil},
		"top_p above 1":     {[]sched.TokenChoice{{Temperature: 1, TopP: 1.5}, {}}, toks, nil},
		"NaN top_p":         {[]sched.TokenChoice{{Temperature: 1, TopP: nan}, {}}, toks, nil},
	}
	for name, c := range bad {
		if err := checkChoices(bt, c.choice, c.toks, c.logits, V); !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: got %v, want ErrBadBatch", name, err)
		}
	}
}

func TestSampleParams(t *testing.T) {
	cases := []struct {
		in                sched.TokenChoice
		temp, topP        float32
		topK              int32
		seed, counterWant uint64
	}{
		{sched.TokenChoice{}, 0, 1, 0, 0, 0}, // greedy, top_p 0 keeps all
		{sched.TokenChoice{Temperature: 0.8, TopK: 1, TopP: 0.5, Seed: 9, Step: 3}, 0, 0.5, 1, 9, 3}, // top_k 1 is greedy
		{sched.TokenChoice{Temperature: 1.2, TopK: 40, TopP: 0.95, Seed: 7, Step: 12}, 1.2, 0.95, 40, 7, 12},
		{sched.TokenChoice{Temperature: 1, TopP: 1}, 1, 1, 0, 0, 0},
	}
	for i, c := range cases {
		temp, k, p, seed, ctr := sampleParams(c.in)
		if temp != c.temp || k != c.topK || p != c.topP || seed != c.seed || ctr != c.counterWant {
			t.Errorf("case %d: sampleParams(%+v) = %v %v %v %v %v", i, c.in, temp, k, p, seed, ctr)
		}
	}
}

func TestFillSampleHost(t *testing.T) {
	const capRows = 8
	lay := sampleOffsets(capRows)
	if lay.seed%8 != 0 || lay.counter%8 != 0 || lay.counter+8*capRows != sampleBytesPerRow*capRows {
		t.Fatalf("layout %+v does not fill %d bytes with aligned 8-byte arrays", lay, sampleBytesPerRow*capRows)
	}
	buf := make([]uint64, sampleBytesPerRow*capRows/8)
	host := unsafe.Pointer(&buf[0])
	choice := []sched.TokenChoice{
		{Temperature: 0.9, TopK: 3, TopP: 0.8, Seed: 11, Step: 4},
		{}, // a row that wants no logits is not in rowSeq
		{Temperature: 0, Seed: 5, Step: 1},
	}
	if greedy := fillSampleHost(host, capRows, []int{0, 2}, choice); greedy {
		t.Fatal("a temperature row was reported greedy")
	}
	temps := unsafe.Slice((*float32)(unsafe.Add(host, lay.temp)), 2)
	ks := unsafe.Slice((*int32)(unsafe.Add(host, lay.topK)), 2)
	ps := unsafe.Slice((*float32)(unsafe.Add(host, lay.topP)), 2)
	seeds := unsafe.Slice((*uint64)(unsafe.Add(host, lay.seed)), 2)
	ctrs := unsafe.Slice((*uint64)(unsafe.Add(host, lay.counter)), 2)
	if temps[0] != 0.9 || ks[0] != 3 || ps[0] != 0.8 || seeds[0] != 11 || ctrs[0] != 4 {
		t.Errorf("row 0: %v %v %v %v %v", temps[0], ks[0], ps[0], seeds[0], ctrs[0])
	}
	if temps[1] != 0 || ps[1] != 1 || seeds[1] != 5 || ctrs[1] != 1 {
		t.Errorf("row 1 (sequence 2): %v %v %v %v", temps[1], ps[1], seeds[1], ctrs[1])
	}
	if greedy := fillSampleHost(host, capRows, []int{1, 2}, choice); !greedy {
		t.Error("two greedy rows were not reported greedy")
	}
}

func TestCheckBlockPairs(t *testing.T) {
	if err := checkBlockPairs([]int32{0, 3}, []int32{7, 3}, 8); err != nil {
		t.Fatalf("valid pairs refused: %v", err)
	}
	for name, p := range map[string][2][]int32{
		"length mismatch": {{1, 2}, {3}},
		"negative src":    {{-1}, {3}},
		"dst past pool":   {{1}, {8}},
	} {
		if err := checkBlockPairs(p[0], p[1], 8); !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: got %v, want ErrBadBatch", name, err)
		}
	}
}
