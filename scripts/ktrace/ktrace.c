// ktrace: a CUDA injection library that records every kernel, memcpy and
// memset a process runs on the GPU (CUPTI's activity API), graph-launched
// kernels included, one line each, so that a step's time can be split into
// kernels and the idle gaps between them without Nsight Systems (which the
// lent GPU machines lack; docs/BENCHMARKS.md, fourteenth session).
//
// Use: build it on the GPU machine (scripts/ktrace/build.sh), then run any
// CUDA program with
//   CUDA_INJECTION64_PATH=/path/libktrace.so TRENI_KTRACE_OUT=/tmp/k.txt prog
// The driver loads the library at cuInit and calls InitializeInjection.
// Records are written as CUPTI hands over its buffers (every 100 ms at the
// latest), so a program that exits without running C's atexit handlers (a
// Go program) loses at most its last 100 ms: leave it idle a moment before
// stopping it.
//
// Line format (space-separated, times in ns on CUPTI's clock):
//   K start end stream graph gx gy gz bx regs name     (a kernel)
//   C start end stream graph bytes copykind            (a memcpy)
//   S start end stream graph bytes                     (a memset)
//   D n                                                (n records CUPTI dropped)
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KREC
#error "build with -DKREC=CUpti_ActivityKernelN (build.sh picks the newest N in cupti_activity.h)"
#endif
#ifndef MREC
#error "build with -DMREC=CUpti_ActivityMemcpyN"
#endif
#ifndef SREC
#error "build with -DSREC=CUpti_ActivityMemsetN"
#endif

static FILE *out;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const size_t buf_size = 4 << 20;

static void CUPTIAPI requested(uint8_t **buf, size_t *size, size_t *max_records) {
	*buf = aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, buf_size);
	*size = *buf ? buf_size : 0;
	*max_records = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
	(void)ctx, (void)stream, (void)size;
	CUpti_Activity *r = NULL;
	pthread_mutex_lock(&mu);
	while (out && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
		switch (r->kind) {
		case CUPTI_ACTIVITY_KIND_KERNEL:
		case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
			const KREC *k = (const KREC *)r;
			fprintf(out, "K %llu %llu %u %u %d %d %d %d %u %s\n", (unsigned long long)k->start,
				(unsigned long long)k->end, k->streamId, k->graphId, k->gridX, k->gridY, k->gridZ,
				k->blockX, (unsigned)k->registersPerThread, k->name ? k->name : "?");
			break;
		}
		case CUPTI_ACTIVITY_KIND_MEMCPY: {
			const MREC *m = (const MREC *)r;
			fprintf(out, "C %llu %llu %u %u %llu %u\n", (unsigned long long)m->start, (unsigned long long)m->end,
				m->streamId, m->graphId, (unsigned long long)m->bytes, (unsigned)m->copyKind);
			break;
		}
		case CUPTI_ACTIVITY_KIND_MEMSET: {
			const SREC *m = (const SREC *)r;
			fprintf(out, "S %llu %llu %u %u %llu\n", (unsigned long long)m->start, (unsigned long long)m->end,
				m->streamId, m->graphId, (unsigned long long)m->bytes);
			break;
		}
		default:
			break;
		}
	}
	size_t dropped = 0;
	if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped && out)
		fprintf(out, "D %zu\n", dropped);
	if (out) fflush(out);
	pthread_mutex_unlock(&mu);
	free(buf);
}

static void finish(void) {
	cuptiActivityFlushAll(1);
	pthread_mutex_lock(&mu);
	if (out) fclose(out);
	out = NULL;
	pthread_mutex_unlock(&mu);
}

static int check(CUptiResult rc, const char *what) {
	if (rc == CUPTI_SUCCESS) return 1;
	const char *msg = NULL;
	cuptiGetResultString(rc, &msg);
	fprintf(stderr, "ktrace: %s: %s\n", what, msg ? msg : "unknown CUPTI error");
	return 0;
}

// InitializeInjection is what the CUDA driver calls, once, when it loads
// the library named by CUDA_INJECTION64_PATH.
int InitializeInjection(void) {
	const char *path = getenv("TRENI_KTRACE_OUT");
	out = fopen(path && *path ? path : "/tmp/ktrace.txt", "w");
	if (!out) {
		perror("ktrace: open TRENI_KTRACE_OUT");
		return 0;
	}
	if (!check(cuptiActivityRegisterCallbacks(requested, completed), "register buffer callbacks") ||
		!check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel records") ||
		!check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy records") ||
		!check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset records"))
		return 0;
	check(cuptiActivityFlushPeriod(100), "set the flush period");
	atexit(finish);
	return 1;
}
