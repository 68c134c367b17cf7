#!/usr/bin/env python3
"""Generate a large server log of one kind, for import's memory and speed
figures (scripts/import-bench.sh, docs/BENCHMARKS.md "Import and report of
large logs").

    scripts/genlog.py KIND MB OUT

KIND is vllm, sglang, tgi, llama.cpp, ollama or treni. The log repeats a
server's startup (its stage lines, with the figures real servers print)
followed by request chatter, with timestamps in the server's own format
advancing a few milliseconds a line, until it holds MB megabytes (10^6
bytes). Each repetition is a restart, so the parser builds new spans all
along the file, and most lines are plain ones, as in a production log.
Nothing here is a real log: the fixtures under trace/serverlog/testdata are.
"""
import datetime as dt
import sys

START = dt.datetime(2025, 6, 1, 8, 0, 0)


def vllm_stamp(t):
    return "INFO %s" % t.strftime("%m-%d %H:%M:%S")


VLLM_STARTUP = [
    ("[__init__.py:239] Automatically detected platform cuda.", 0.5),
    ("[api_server.py:1043] vLLM API server version 0.8.5.post1", 0.5),
    ("[core.py:58] Initializing a V1 LLM engine (v0.8.5.post1) with config: model='Qwen/Qwen2.5-1.5B-Instruct', tensor_parallel_size=1, device_config=cuda", 1.0),
    ("[gpu_model_runner.py:1329] Starting to load model Qwen/Qwen2.5-1.5B-Instruct...", 0.2),
    ("[weight_utils.py:265] Using model weights format ['*.safetensors']", 3.0),
    ("[loader.py:458] Loading weights took 2.85 seconds", 0.1),
    ("[gpu_model_runner.py:1347] Model loading took 2.8871 GiB and 3.12 seconds", 4.0),
    ("[backends.py:420] Using cache directory: /root/.cache/vllm/torch_compile_cache/abc/rank_0_0 for vLLM's torch.compile", 0.1),
    ("[backends.py:430] Dynamo bytecode transform time: 6.21 s", 9.0),
    ("[backends.py:148] Compiling a graph for general shape takes 8.90 s", 0.4),
    ("[monitor.py:33] torch.compile takes 15.11 s in total", 1.0),
    ("[kv_cache_utils.py:634] GPU KV cache size: 1,012,480 tokens", 0.0),
    ("[kv_cache_utils.py:637] Maximum concurrency for 32,768 tokens per request: 30.90x", 12.0),
    ("[gpu_model_runner.py:1686] Graph capturing finished in 12 secs, took 0.45 GiB", 0.1),
    ("[core.py:159] init engine (profile, create kv cache, warmup model) took 31.20 seconds", 0.5),
    ("[api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000", 0.2),
]
VLLM_CHATTER = [
    "[logger.py:39] Received request chatcmpl-{n}: prompt: '<|im_start|>user\\nWrite a haiku about the sea.<|im_end|>\\n', params: SamplingParams(n=1, temperature=0.7, max_tokens=128), lora_request: None",
    "[async_llm.py:252] Added request chatcmpl-{n}.",
    "[loggers.py:116] Engine 000: Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 88.1 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.4%, Prefix cache hit rate: 41.2%",
]


def vllm_lines(t, n, startup):
    if startup:
        for msg, adv in VLLM_STARTUP:
            yield "%s %s" % (vllm_stamp(t), msg)
            t += dt.timedelta(seconds=adv)
        yield "INFO:     Started server process [%d]" % (1000 + n % 30000)
        yield "INFO:     Application startup complete."
        return
    for i, msg in enumerate(VLLM_CHATTER):
        yield "%s %s" % (vllm_stamp(t), msg.format(n=n))
    yield 'INFO:     127.0.0.1:%d - "POST /v1/chat/completions HTTP/1.1" 200 OK' % (40000 + n % 20000)


def sglang_stamp(t):
    return "[%s TP0]" % t.strftime("%Y-%m-%d %H:%M:%S")


SGLANG_STARTUP = [
    ("server_args=ServerArgs(model_path='meta-llama/Meta-Llama-3.1-8B-Instruct', tp_size=1, device='cuda', mem_fraction_static=0.88)", 1.0),
    ("Init torch distributed begin.", 1.0),
    ("Init torch distributed ends. mem usage=0.00 GB", 0.5),
    ("Load weight begin. avail mem=78.50 GB", 5.0),
    ("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.47 GB, mem usage=15.03 GB.", 0.5),
    ("KV Cache is allocated. #tokens: 444505, K size: 27.13 GB, V size: 27.13 GB", 0.0),
    ("Memory pool end. avail mem=8.19 GB", 0.5),
    ("Capture cuda graph begin. This can take up to several minutes. avail mem=7.62 GB", 6.0),
    ("Capture cuda graph end. Time elapsed: 6.57 s. mem usage=0.55 GB. avail mem=7.07 GB.", 1.0),
    ("max_total_num_tokens=444505, chunked_prefill_size=8192, max_prefill_tokens=16384", 1.0),
]
SGLANG_CHATTER = [
    "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: {n}, token usage: 0.00, #running-req: 0, #queue-req: 0",
    "Decode batch. #running-req: 1, #token: 40, token usage: 0.00, gen throughput (token/s): 92.31, #queue-req: 0",
]


def sglang_lines(t, n, startup):
    if startup:
        for msg, adv in SGLANG_STARTUP:
            yield "%s %s" % (sglang_stamp(t), msg)
            t += dt.timedelta(seconds=adv)
        yield "[%s] INFO:     Started server process [%d]" % (t.strftime("%Y-%m-%d %H:%M:%S"), 1000 + n % 30000)
        yield "[%s] INFO:     Application startup complete." % t.strftime("%Y-%m-%d %H:%M:%S")
        yield "[%s] The server is fired up and ready to roll!" % (t + dt.timedelta(seconds=2)).strftime("%Y-%m-%d %H:%M:%S")
        return
    for msg in SGLANG_CHATTER:
        yield "%s %s" % (sglang_stamp(t), msg.format(n=n % 97))
    yield '[%s] INFO:     127.0.0.1:%d - "POST /v1/chat/completions HTTP/1.1" 200 OK' % (t.strftime("%Y-%m-%d %H:%M:%S"), 40000 + n % 20000)


def tgi_stamp(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"


TGI_STARTUP = [
    ("INFO text_generation_launcher: Args { model_id: \"mistralai/Mistral-7B-Instruct-v0.2\", num_shard: Some(2) }", 0.1),
    ("INFO text_generation_launcher: Sharding model on 2 processes", 0.1),
    ("INFO download: text_generation_launcher: Starting download process.", 2.0),
    ("INFO download: text_generation_launcher: Successfully downloaded weights.", 0.1),
    ("INFO shard-manager: text_generation_launcher: Starting shard rank=0", 0.0),
    ("INFO shard-manager: text_generation_launcher: Starting shard rank=1", 9.0),
    ("INFO shard-manager: text_generation_launcher: Shard ready in 9.71s rank=0", 0.0),
    ("INFO shard-manager: text_generation_launcher: Shard ready in 9.69s rank=1", 0.2),
    ("INFO text_generation_launcher: Starting Webserver", 0.1),
    ("INFO text_generation_router_v3: backends/v3/src/lib.rs:125: Warming up model", 2.6),
    ("INFO text_generation_launcher: KV-cache blocks: 26880, size: 1", 0.1),
    ("INFO text_generation_launcher: Cuda Graphs are enabled for sizes [32, 16, 8, 4, 2, 1]", 1.0),
    ("INFO text_generation_router_v3: backends/v3/src/lib.rs:137: Setting max batch total tokens to 26880", 0.1),
    ("INFO text_generation_router::server: router/src/server.rs:2419: Connected", 0.1),
]
TGI_CHATTER = [
    "INFO chat_completions{{total_time=\"1.21s\" validation_time=\"1.1ms\" queue_time=\"85us\" inference_time=\"1.2s\" time_per_token=\"9.4ms\" seed=\"Some({n})\"}}: text_generation_router::server: router/src/server.rs:622: Success",
    "INFO compat_generate{{default_return_full_text=false}}: text_generation_router::server: router/src/server.rs:322: Success",
]


def tgi_lines(t, n, startup):
    msgs = TGI_STARTUP if startup else [(m.format(n=n), 0.004) for m in TGI_CHATTER]
    for msg, adv in msgs:
        yield "%s  %s" % (tgi_stamp(t), msg)
        t += dt.timedelta(seconds=adv)


LLAMA_STARTUP = [
    "build: 6699 (c08002a1) with cc (GCC) 14.3.1 for x86_64-redhat-linux",
    "ggml_cuda_init: found 1 CUDA devices:",
    "  Device 0: NVIDIA GeForce RTX 3070, compute capability 8.6, VMM: yes",
    "main: loading model",
    "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 3070) - 7000 MiB free",
    "llama_model_loader: loaded meta data with 35 key-value pairs and 459 tensors from /models/gpt-oss-20b.gguf (version GGUF V3 (latest))",
    "llama_model_loader: - kv   0:                       general.architecture str              = gpt-oss",
    "print_info: file format = GGUF V3 (latest)",
    "load_tensors: loading model tensors, this can take a while... (mmap = true)",
    "load_tensors: offloaded 25/25 layers to GPU",
    "load_tensors:        CUDA0 model buffer size =  1242.03 MiB",
    "load_tensors:   CPU_Mapped model buffer size = 10949.33 MiB",
    "llama_context: constructing llama_context",
    "llama_kv_cache:      CUDA0 KV buffer size =  3090.00 MiB",
    "llama_context:      CUDA0 compute buffer size =   720.14 MiB",
    "llama_context: graph splits = 146 (with bs=512), 50 (with bs=1)",
    "common_init_from_params: warming up the model with an empty run - please wait ... (--no-warmup to disable)",
    "srv          init: initializing slots, n_slots = 1",
    "main: model loaded",
    "main: server is listening on http://127.0.0.1:8080 - starting the main loop",
]
LLAMA_CHATTER = [
    "slot launch_slot_: id  0 | task {n} | processing task",
    "slot update_slots: id  0 | task {n} | new prompt, n_ctx_slot = 131072, n_keep = 0, n_prompt_tokens = 15",
    "slot      release: id  0 | task {n} | stop processing: n_past = 143, truncated = 0",
    "srv  log_server_r: request: POST /completion 127.0.0.1 200",
]


def llama_lines(t, n, startup):
    if startup:
        yield from LLAMA_STARTUP
        return
    for m in LLAMA_CHATTER:
        yield m.format(n=n)


def ollama_stamp(t):
    return "time=%s.%03d+00:00" % (t.strftime("%Y-%m-%dT%H:%M:%S"), t.microsecond // 1000)


OLLAMA_STARTUP = [
    ('level=INFO source=routes.go:1331 msg="Listening on 127.0.0.1:11434 (version 0.11.4)"', 0.3),
    ('level=INFO source=types.go:130 msg="inference compute" id=GPU-1 library=cuda variant=v12 compute=8.6 driver=12.4 name="NVIDIA GeForce RTX 3060" total="12.0 GiB" available="11.2 GiB"', 4.0),
    ('level=INFO source=server.go:438 msg="starting llama server" cmd="/usr/bin/ollama runner --model /root/.ollama/models/blobs/sha256-60e0 --port 40000"', 0.1),
    ('level=INFO source=server.go:587 msg="waiting for llama runner to start responding"', 2.4),
    ('level=INFO source=server.go:1390 msg="llama runner started in 2.46 seconds"', 0.1),
]
OLLAMA_RUNNER = [
    "llama_model_loader: loaded meta data with 34 key-value pairs and 339 tensors from /root/.ollama/models/blobs/sha256-60e0 (version GGUF V3 (latest))",
    "load_tensors: offloaded 29/29 layers to GPU",
    "load_tensors:        CUDA0 model buffer size =  4168.09 MiB",
    "llama_context: constructing llama_context",
    "llama_kv_cache:      CUDA0 KV buffer size =   224.00 MiB",
    "llama_context: graph splits = 2",
]


def ollama_lines(t, n, startup):
    if startup:
        for i, (msg, adv) in enumerate(OLLAMA_STARTUP):
            yield "%s %s" % (ollama_stamp(t), msg)
            t += dt.timedelta(seconds=adv)
            if i == 3:
                yield from OLLAMA_RUNNER
        yield '[GIN] %s | 200 |  4.006473015s |       127.0.0.1 | POST     "/api/generate"' % t.strftime("%Y/%m/%d - %H:%M:%S")
        return
    yield '%s level=DEBUG source=sched.go:575 msg="evaluating already loaded" model=/root/.ollama/models/blobs/sha256-60e0 request={n}'.format(n=n) % ollama_stamp(t)
    yield '[GIN] %s | 200 |  612.1123ms |       127.0.0.1 | POST     "/api/chat"' % t.strftime("%Y/%m/%d - %H:%M:%S")


TRENI_STAGES = ["runtime_init", "cuda_init", "page_cache", "tensor_index_build", "tokenizer_load", "decoder_tensor_upload", "kv_alloc", "warmup", "http_ready"]


def treni_lines(t, n, startup):
    ns = int((t - dt.datetime(1970, 1, 1)).total_seconds() * 1e9)
    for i, st in enumerate(TRENI_STAGES):
        s = ns + i * 3_000_000
        yield '{"treni_stage":"v1","stage":"%s","start_ns":%d,"end_ns":%d,"pid":%d,"attrs":{"bytes":%d,"gb_per_s":%.2f}}' % (
            st, s, s + 2_500_000, 1000 + n % 30000, 1_503_238_144 + i, 24.5 + i)


# kind: (lines, chatter blocks after each start, seconds between starts).
# The clock stays in the past for 1 GB of any kind: a stamp after the
# log's file was written is refused.
KINDS = {
    "vllm": (vllm_lines, 400, 60),
    "sglang": (sglang_lines, 400, 60),
    "tgi": (tgi_lines, 400, 60),
    "llama.cpp": (llama_lines, 400, 60),
    "ollama": (ollama_lines, 400, 60),
    "treni": (treni_lines, 0, 1),
}


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in KINDS:
        sys.exit("usage: genlog.py {%s} MB OUT" % ",".join(KINDS))
    gen, chatter, gap = KINDS[sys.argv[1]]
    limit = int(float(sys.argv[2]) * 1e6)
    t = START
    n = 0
    size = 0
    with open(sys.argv[3], "w", buffering=1 << 20) as f:
        while size < limit:
            block = list(gen(t, n, True))
            t += dt.timedelta(seconds=gap)
            for i in range(chatter):
                block.extend(gen(t, n * chatter + i, False))
                t += dt.timedelta(milliseconds=7)
            text = "\n".join(block) + "\n"
            f.write(text)
            size += len(text.encode())
            n += 1


if __name__ == "__main__":
    main()
