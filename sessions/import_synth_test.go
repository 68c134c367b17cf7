package sessions

import (
	"bytes"
	"fmt"
	"time"
)

// synthLog is a log of the kind's server of about size bytes, in the
// shapes scripts/genlog.py writes for the large-log figures: a startup
// with the stage lines and figures real servers print, then request
// chatter, repeated (every repetition a restart), the clock a few
// milliseconds a line. The benchmarks and the pipeline's test read it;
// nothing in it is a real log (the fixtures are).
func synthLog(kind string, size int) []byte {
	var b bytes.Buffer
	t := time.Date(2025, 6, 1, 8, 0, 0, 0, time.UTC)
	gen := synthKinds[kind]
	for n := 0; b.Len() < size; n++ {
		gen.startup(&b, t, n)
		t = t.Add(gen.gap)
		for i := 0; i < gen.chatter; i++ {
			gen.chat(&b, t, n*gen.chatter+i)
			t = t.Add(7 * time.Millisecond)
		}
	}
	return b.Bytes()
}

// synthKind writes one kind's startup and one block of its chatter.
type synthKind struct {
	startup func(b *bytes.Buffer, t time.Time, n int)
	chat    func(b *bytes.Buffer, t time.Time, n int)
	chatter int           // chatter blocks after each startup
	gap     time.Duration // from a startup to its chatter
}

// timed writes msgs, each after the stamp of t (stamp formats it),
// advancing t by the step beside each.
func timed(b *bytes.Buffer, t time.Time, stamp func(time.Time) string, msgs []string, steps []float64) {
	for i, m := range msgs {
		fmt.Fprintf(b, "%s %s\n", stamp(t), m)
		if i < len(steps) {
			t = t.Add(time.Duration(steps[i] * float64(time.Second)))
		}
	}
}

var synthKinds = map[string]synthKind{
	"vllm": {
		startup: func(b *bytes.Buffer, t time.Time, n int) {
			timed(b, t, func(t time.Time) string { return "INFO " + t.Format("01-02 15:04:05") }, []string{
				"[__init__.py:239] Automatically detected platform cuda.",
				"[api_server.py:1043] vLLM API server version 0.8.5.post1",
				"[core.py:58] Initializing a V1 LLM engine (v0.8.5.post1) with config: model='Qwen/Qwen2.5-1.5B-Instruct', tensor_parallel_size=1, device_config=cuda",
				"[gpu_model_runner.py:1329] Starting to load model Qwen/Qwen2.5-1.5B-Instruct...",
				"[loader.py:458] Loading weights took 2.85 seconds",
				"[gpu_model_runner.py:1347] Model loading took 2.8871 GiB and 3.12 seconds",
				"[backends.py:430] Dynamo bytecode transform time: 6.21 s",
				"[monitor.py:33] torch.compile takes 15.11 s in total",
				"[kv_cache_utils.py:634] GPU KV cache size: 1,012,480 tokens",
				"[gpu_model_runner.py:1686] Graph capturing finished in 12 secs, took 0.45 GiB",
				"[core.py:159] init engine (profile, create kv cache, warmup model) took 31.20 seconds",
				"[api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000",
			}, []float64{0.5, 0.5, 1, 3, 0.1, 4, 9, 1, 12, 0.1, 0.5})
			fmt.Fprintf(b, "INFO:     Started server process [%d]\nINFO:     Application startup complete.\n", 1000+n%30000)
		},
		chat: func(b *bytes.Buffer, t time.Time, n int) {
			s := "INFO " + t.Format("01-02 15:04:05")
			fmt.Fprintf(b, "%s [logger.py:39] Received request chatcmpl-%d: prompt: '<|im_start|>user\\nWrite a haiku about the sea.<|im_end|>\\n', params: SamplingParams(n=1, temperature=0.7, max_tokens=128), lora_request: None\n", s, n)
			fmt.Fprintf(b, "%s [async_llm.py:252] Added request chatcmpl-%d.\n", s, n)
			fmt.Fprintf(b, "%s [loggers.py:116] Engine 000: Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 88.1 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.4%%, Prefix cache hit rate: 41.2%%\n", s)
			fmt.Fprintf(b, "INFO:     127.0.0.1:%d - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n", 40000+n%20000)
		},
		chatter: 400, gap: time.Minute,
	},
	"sglang": {
		startup: func(b *bytes.Buffer, t time.Time, n int) {
			stamp := func(t time.Time) string { return "[" + t.Format("2006-01-02 15:04:05") + " TP0]" }
			timed(b, t, stamp, []string{
				"server_args=ServerArgs(model_path='meta-llama/Meta-Llama-3.1-8B-Instruct', tp_size=1, device='cuda', mem_fraction_static=0.88)",
				"Init torch distributed begin.",
				"Init torch distributed ends. mem usage=0.00 GB",
				"Load weight begin. avail mem=78.50 GB",
				"Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.47 GB, mem usage=15.03 GB.",
				"KV Cache is allocated. #tokens: 444505, K size: 27.13 GB, V size: 27.13 GB",
				"Memory pool end. avail mem=8.19 GB",
				"Capture cuda graph begin. This can take up to several minutes. avail mem=7.62 GB",
				"Capture cuda graph end. Time elapsed: 6.57 s. mem usage=0.55 GB. avail mem=7.07 GB.",
			}, []float64{1, 1, 0.5, 5, 0.5, 0, 0.5, 6, 1})
			end := t.Add(16 * time.Second).Format("2006-01-02 15:04:05")
			fmt.Fprintf(b, "[%s] INFO:     Started server process [%d]\n[%s] INFO:     Application startup complete.\n[%s] The server is fired up and ready to roll!\n", end, 1000+n%30000, end, end)
		},
		chat: func(b *bytes.Buffer, t time.Time, n int) {
			s := "[" + t.Format("2006-01-02 15:04:05") + " TP0]"
			fmt.Fprintf(b, "%s Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: %d, token usage: 0.00, #running-req: 0, #queue-req: 0\n", s, n%97)
			fmt.Fprintf(b, "%s Decode batch. #running-req: 1, #token: 40, token usage: 0.00, gen throughput (token/s): 92.31, #queue-req: 0\n", s)
			fmt.Fprintf(b, "[%s] INFO:     127.0.0.1:%d - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n", t.Format("2006-01-02 15:04:05"), 40000+n%20000)
		},
		chatter: 400, gap: time.Minute,
	},
	"tgi": {
		startup: func(b *bytes.Buffer, t time.Time, n int) {
			timed(b, t, func(t time.Time) string { return t.Format("2006-01-02T15:04:05.000000Z") + " " }, []string{
				`INFO text_generation_launcher: Args { model_id: "mistralai/Mistral-7B-Instruct-v0.2", num_shard: Some(2) }`,
				"INFO text_generation_launcher: Sharding model on 2 processes",
				"INFO download: text_generation_launcher: Starting download process.",
				"INFO download: text_generation_launcher: Successfully downloaded weights.",
				"INFO shard-manager: text_generation_launcher: Starting shard rank=0",
				"INFO shard-manager: text_generation_launcher: Starting shard rank=1",
				"INFO shard-manager: text_generation_launcher: Shard ready in 9.71s rank=0",
				"INFO shard-manager: text_generation_launcher: Shard ready in 9.69s rank=1",
				"INFO text_generation_launcher: Starting Webserver",
				"INFO text_generation_router_v3: backends/v3/src/lib.rs:125: Warming up model",
				"INFO text_generation_launcher: KV-cache blocks: 26880, size: 1",
				"INFO text_generation_router::server: router/src/server.rs:2419: Connected",
			}, []float64{0.1, 0.1, 2, 0.1, 0, 9, 0, 0.2, 0.1, 2.6, 1})
		},
		chat: func(b *bytes.Buffer, t time.Time, n int) {
			s := t.Format("2006-01-02T15:04:05.000000Z")
			fmt.Fprintf(b, "%s  INFO chat_completions{total_time=\"1.21s\" validation_time=\"1.1ms\" queue_time=\"85us\" inference_time=\"1.2s\" time_per_token=\"9.4ms\" seed=\"Some(%d)\"}: text_generation_router::server: router/src/server.rs:622: Success\n", s, n)
			fmt.Fprintf(b, "%s  INFO compat_generate{default_return_full_text=false}: text_generation_router::server: router/src/server.rs:322: Success\n", s)
		},
		chatter: 400, gap: time.Minute,
	},
	"llama.cpp": {
		startup: func(b *bytes.Buffer, _ time.Time, _ int) {
			b.WriteString(`build: 6699 (c08002a1) with cc (GCC) 14.3.1 for x86_64-redhat-linux
ggml_cuda_init: found 1 CUDA devices:
  Device 0: NVIDIA GeForce RTX 3070, compute capability 8.6, VMM: yes
main: loading model
llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 3070) - 7000 MiB free
llama_model_loader: loaded meta data with 35 key-value pairs and 459 tensors from /models/gpt-oss-20b.gguf (version GGUF V3 (latest))
print_info: file format = GGUF V3 (latest)
load_tensors: loading model tensors, this can take a while... (mmap = true)
load_tensors: offloaded 25/25 layers to GPU
load_tensors:        CUDA0 model buffer size =  1242.03 MiB
llama_context: constructing llama_context
llama_kv_cache:      CUDA0 KV buffer size =  3090.00 MiB
llama_context: graph splits = 146 (with bs=512), 50 (with bs=1)
common_init_from_params: warming up the model with an empty run - please wait ... (--no-warmup to disable)
srv          init: initializing slots, n_slots = 1
main: model loaded
main: server is listening on http://127.0.0.1:8080 - starting the main loop
`)
		},
		chat: func(b *bytes.Buffer, _ time.Time, n int) {
			fmt.Fprintf(b, "slot launch_slot_: id  0 | task %d | processing task\nslot update_slots: id  0 | task %d | new prompt, n_ctx_slot = 131072, n_keep = 0, n_prompt_tokens = 15\nslot      release: id  0 | task %d | stop processing: n_past = 143, truncated = 0\nsrv  log_server_r: request: POST /completion 127.0.0.1 200\n", n, n, n)
		},
		chatter: 400, gap: time.Minute,
	},
	"ollama": {
		startup: func(b *bytes.Buffer, t time.Time, _ int) {
			stamp := func(t time.Time) string { return "time=" + t.Format("2006-01-02T15:04:05.000+00:00") }
			timed(b, t, stamp, []string{
				`level=INFO source=routes.go:1331 msg="Listening on 127.0.0.1:11434 (version 0.11.4)"`,
				`level=INFO source=types.go:130 msg="inference compute" id=GPU-1 library=cuda variant=v12 compute=8.6 driver=12.4 name="NVIDIA GeForce RTX 3060" total="12.0 GiB" available="11.2 GiB"`,
				`level=INFO source=server.go:438 msg="starting llama server" cmd="/usr/bin/ollama runner --model /root/.ollama/models/blobs/sha256-60e0 --port 40000"`,
				`level=INFO source=server.go:587 msg="waiting for llama runner to start responding"`,
			}, []float64{0.3, 4, 0.1, 2.4})
			b.WriteString("llama_model_loader: loaded meta data with 34 key-value pairs and 339 tensors from /root/.ollama/models/blobs/sha256-60e0 (version GGUF V3 (latest))\nload_tensors: offloaded 29/29 layers to GPU\nllama_kv_cache:      CUDA0 KV buffer size =   224.00 MiB\n")
			t = t.Add(6800 * time.Millisecond)
			fmt.Fprintf(b, "%s level=INFO source=server.go:1390 msg=\"llama runner started in 2.46 seconds\"\n", stamp(t))
			fmt.Fprintf(b, "[GIN] %s | 200 |  4.006473015s |       127.0.0.1 | POST     \"/api/generate\"\n", t.Format("2006/01/02 - 15:04:05"))
		},
		chat: func(b *bytes.Buffer, t time.Time, n int) {
			fmt.Fprintf(b, "time=%s level=DEBUG source=sched.go:575 msg=\"evaluating already loaded\" model=/root/.ollama/models/blobs/sha256-60e0 request=%d\n", t.Format("2006-01-02T15:04:05.000+00:00"), n)
			fmt.Fprintf(b, "[GIN] %s | 200 |  612.1123ms |       127.0.0.1 | POST     \"/api/chat\"\n", t.Format("2006/01/02 - 15:04:05"))
		},
		chatter: 400, gap: time.Minute,
	},
	"treni": {
		startup: func(b *bytes.Buffer, t time.Time, n int) {
			for i, st := range []string{"runtime_init", "cuda_init", "page_cache", "tensor_index_build", "tokenizer_load", "decoder_tensor_upload", "kv_alloc", "warmup", "http_ready"} {
				s := t.UnixNano() + int64(i)*3_000_000
				fmt.Fprintf(b, `{"treni_stage":"v1","stage":"%s","start_ns":%d,"end_ns":%d,"pid":%d,"attrs":{"bytes":%d,"gb_per_s":%.2f}}`+"\n", st, s, s+2_500_000, 1000+n%30000, 1_503_238_144+i, 24.5+float64(i))
			}
		},
		chat:    func(*bytes.Buffer, time.Time, int) {},
		chatter: 0, gap: time.Second,
	},
}
