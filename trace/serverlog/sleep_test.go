package serverlog

import (
	"testing"
	"time"

	"github.com/treni-top/treni-top/trace"
)

// TestVLLMSleepAndWake: vLLM's sleep mode lines (vllm/v1/executor's "It
// took … seconds to fall asleep" and "… to wake up tags …", the workers'
// "Sleep mode freed …") become a sleep span per sleep and a weights_restore
// span per wake of the weights (kv_alloc for a wake of the KV cache alone),
// each a span of its own even a second after the last, sized by vLLM's own
// figure, with the memory the workers freed.
func TestVLLMSleepAndWake(t *testing.T) {
	_, spans := feedAll(KindVLLM,
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:00 [gpu_worker.py:116] Sleep mode freed 12.34 GiB memory, 1.02 GiB memory is still in use.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:01 [abstract.py:233] It took 0.744026 seconds to fall asleep.",
		"(APIServer pid=2) INFO 11-29 05:00:02 [api_server.py:1] wake up the engine with tags: None",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:03 [abstract.py:251] It took 0.779162 seconds to wake up tags {'weights', 'kv_cache'}.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:04 [abstract.py:233] It took 0.500000 seconds to fall asleep.",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:05 [abstract.py:251] It took 0.250000 seconds to wake up tags ['weights'].",
		"(EngineCore_DP0 pid=7) INFO 11-29 05:00:06 [abstract.py:251] It took 0.125000 seconds to wake up tags ['kv_cache'].",
	)
	var sleeps, restores, kvs []trace.Span
	for _, s := range spans {
		switch s.Name {
		case trace.StageSleep:
			sleeps = append(sleeps, s)
		case trace.StageWeightsRestore:
			restores = append(restores, s)
		case trace.StageKVAlloc:
			kvs = append(kvs, s)
		}
	}
	if len(sleeps) != 2 || len(restores) != 2 || len(kvs) != 1 {
		t.Fatalf("%d sleep, %d weights_restore, %d kv_alloc spans, want 2, 2, 1: %v", len(sleeps), len(restores), len(kvs), spans)
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	if d := sleeps[0].Duration(); d < ms(744) || d > ms(745) {
		t.Errorf("first sleep %v, want vLLM's 0.744 s", d)
	}
	if b, _ := sleeps[0].Attrs.Float("freed_bytes"); !approx(b, 12.34*giB) {
		t.Errorf("first sleep attrs %v, want the freed memory", sleeps[0].Attrs)
	}
	if _, ok := sleeps[1].Attrs.Float("freed_bytes"); ok {
		t.Errorf("the second sleep took the first one's freed memory: %v", sleeps[1].Attrs)
	}
	if d := restores[0].Duration(); d < ms(779) || d > ms(780) || restores[0].Attrs["tags"] != "{'weights', 'kv_cache'}" {
		t.Errorf("first wake %v %v", d, restores[0].Attrs)
	}
	if d := kvs[0].Duration(); d != ms(125) || kvs[0].Attrs["tags"] != "['kv_cache']" {
		t.Errorf("the KV cache's wake %v %v", d, kvs[0].Attrs)
	}
	for i := 1; i < len(restores); i++ {
		if restores[i].Start <= restores[i-1].End {
			t.Errorf("wakes %d and %d overlap: two wakes merged", i-1, i)
		}
	}
}
