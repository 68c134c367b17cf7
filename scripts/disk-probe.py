#!/usr/bin/env python3
"""How fast the weight files come off storage with the page cache cold, read
the ways the CUDA backend's staged upload could read them.

    python3 scripts/disk-probe.py MODEL_DIR [MODE ...]

Each MODE is NAME:THREADS:CHUNK_MIB[:AHEAD], NAME one of
  ranges    THREADS threads a file, each with its own descriptor, pread
            their own contiguous shares of it (the cold bench's disk
            floor, scripts/gpu-cold-bench.sh: ranges:1:8 and ranges:8:8)
  queue     threads take CHUNK-sized reads from one queue in file order,
            as the upload's readers do (one descriptor a file, shared)
  queuefd   the same, each thread with descriptors of its own (the
            kernel keeps readahead state per open file)
  direct    the same with O_DIRECT (page-aligned buffers; nothing enters
            the page cache)
  willneed  queue, each thread first asking the kernel
            (POSIX_FADV_WILLNEED) for the chunk AHEAD chunks further on
Before each mode the files' pages are evicted (fdatasync, then
POSIX_FADV_DONTNEED). Prints one line a mode and a JSON list last.
"""
import glob
import json
import mmap
import os
import sys
import threading
import time


def evict(files):
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def chunks_of(files, size):
    out = []
    for f in files:
        n = os.path.getsize(f)
        for off in range(0, n, size):
            out.append((f, off, min(size, n - off)))
    return out


def run(files, name, threads, chunk_mib, ahead):
    size = chunk_mib << 20
    evict(files)
    total = sum(os.path.getsize(f) for f in files)
    flags = os.O_RDONLY | (os.O_DIRECT if name == "direct" else 0)
    fds = {f: os.open(f, flags) for f in files}
    own = name in ("ranges", "queuefd")
    lock = threading.Lock()
    if name == "ranges":
        jobs = []
        for f in files:
            n = os.path.getsize(f)
            step = (n + threads - 1) // threads
            for i in range(threads):
                jobs.append([(f, i * step, min(n, (i + 1) * step))])
        work = jobs
    else:
        work = chunks_of(files, size)
    nxt = [0]
    got = [0]
    err = []

    def take():
        with lock:
            i = nxt[0]
            nxt[0] += 1
        return i

    def reader(my):
        buf = mmap.mmap(-1, size)  # page aligned, as O_DIRECT needs
        mine = {f: os.open(f, flags) for f in files} if own else fds
        try:
            if name == "ranges":
                for f, lo, hi in my:
                    while lo < hi:
                        k = os.preadv(mine[f], [memoryview(buf)[: min(size, hi - lo)]], lo)
                        if k <= 0:
                            break
                        lo += k
                        with lock:
                            got[0] += k
                return
            while True:
                i = take()
                if i >= len(work):
                    return
                f, off, n = work[i]
                if name == "willneed" and i + ahead < len(work):
                    g, o2, n2 = work[i + ahead]
                    os.posix_fadvise(fds[g], o2, n2, os.POSIX_FADV_WILLNEED)
                want = (n + 4095) & ~4095 if name == "direct" else n
                k = os.preadv(mine[f], [memoryview(buf)[:want]], off)
                if k < n:
                    raise IOError("short read %s at %d: %d of %d" % (f, off, k, n))
                with lock:
                    got[0] += n
        except Exception as e:  # noqa: BLE001 - reported below
            err.append(repr(e))
        finally:
            buf.close()
            if own:
                for fd in mine.values():
                    os.close(fd)

    t = time.time()
    if name == "ranges":
        ths = [threading.Thread(target=reader, args=(j,)) for j in work]
    else:
        ths = [threading.Thread(target=reader, args=(None,)) for _ in range(threads)]
    for x in ths:
        x.start()
    for x in ths:
        x.join()
    dt = time.time() - t
    for fd in fds.values():
        os.close(fd)
    res = {"mode": name, "threads": threads, "chunk_mib": chunk_mib, "ahead": ahead, "bytes": got[0],
           "seconds": dt, "gb_per_s": got[0] / dt / 1e9, "errors": err[:3]}
    print("%-9s threads %2d chunk %3d MiB ahead %2d: %.2f GB/s (%.2f s, %.2f GB)%s" % (
        name, threads, chunk_mib, ahead, res["gb_per_s"], dt, got[0] / 1e9,
        "" if not err else " ERROR " + err[0]), flush=True)
    if got[0] != total and not err:
        print("  read %d of %d bytes" % (got[0], total), flush=True)
    return res


def main():
    d = sys.argv[1]
    files = sorted(glob.glob(os.path.join(d, "*.safetensors")))
    if not files:
        sys.exit("no .safetensors files in %s" % d)
    modes = sys.argv[2:] or ["ranges:8:8", "queue:8:16", "direct:8:16", "direct:16:16", "willneed:8:16:8"]
    out = []
    for m in modes:
        p = m.split(":")
        out.append(run(files, p[0], int(p[1]), int(p[2]), int(p[3]) if len(p) > 3 else 0))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
