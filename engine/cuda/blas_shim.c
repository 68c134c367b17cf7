#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "blas_shim.h"

#define LT_RESOLVE(field) do { \
	*(void **)(&b->field) = dlsym(b->lib, #field); \
	if (!b->field) { snprintf(err, errlen, "symbol %s not found in %s", #field, path); goto fail; } \
} while (0)

tt_blaslt *tt_blaslt_open(const char *path, char *err, size_t errlen) {
	tt_blaslt *b = calloc(1, sizeof(tt_blaslt));
	if (!b) { snprintf(err, errlen, "out of memory"); return NULL; }
	b->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!b->lib) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		free(b);
		return NULL;
	}
	LT_RESOLVE(cublasLtGetVersion);
	*(void **)(&b->cublasLtGetStatusName) = dlsym(b->lib, "cublasLtGetStatusName");
	*(void **)(&b->cublasLtGetStatusString) = dlsym(b->lib, "cublasLtGetStatusString");
	LT_RESOLVE(cublasLtCreate);
	LT_RESOLVE(cublasLtDestroy);
	LT_RESOLVE(cublasLtMatmulDescCreate);
	LT_RESOLVE(cublasLtMatmulDescDestroy);
	LT_RESOLVE(cublasLtMatmulDescSetAttribute);
	LT_RESOLVE(cublasLtMatrixLayoutCreate);
	LT_RESOLVE(cublasLtMatrixLayoutDestroy);
	LT_RESOLVE(cublasLtMatmulPreferenceCreate);
	LT_RESOLVE(cublasLtMatmulPreferenceDestroy);
	LT_RESOLVE(cublasLtMatmulPreferenceSetAttribute);
	LT_RESOLVE(cublasLtMatmulAlgoGetHeuristic);
	LT_RESOLVE(cublasLtMatmul);
	return b;
fail:
	dlclose(b->lib);
	free(b);
	return NULL;
}

void tt_blaslt_close(tt_blaslt *b) {
	// Like the driver, the library stays loaded; only the table is freed.
	free(b);
}

enum {
	LT_COMPUTE_32F = 68,   // CUBLAS_COMPUTE_32F
	LT_R_32F = 0,          // CUDA_R_32F
	LT_DESC_TRANSA = 3,    // CUBLASLT_MATMUL_DESC_TRANSA
	LT_DESC_TRANSB = 4,    // CUBLASLT_MATMUL_DESC_TRANSB
	LT_PREF_MAX_WS = 1,    // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
	LT_NOT_SUPPORTED = 15, // CUBLAS_STATUS_NOT_SUPPORTED
};

#define LT_TRY(call, name) do { int _s = (call); if (_s != 0) { *failed = name; st = _s; goto fail; } } while (0)

int tt_lt_plan(tt_blaslt *b, tt_ltHandle h, tt_ltPlan *p, int transa, int transb, tt_ltLayoutSpec a,
	tt_ltLayoutSpec bb, tt_ltLayoutSpec c, size_t maxws, const char **failed) {
	int st = 0;
	tt_ltPref pref = NULL;
	memset(p, 0, sizeof(*p));
	LT_TRY(b->cublasLtMatmulDescCreate(&p->desc, LT_COMPUTE_32F, LT_R_32F), "cublasLtMatmulDescCreate");
	LT_TRY(b->cublasLtMatmulDescSetAttribute(p->desc, LT_DESC_TRANSA, &transa, sizeof(transa)), "cublasLtMatmulDescSetAttribute(TRANSA)");
	LT_TRY(b->cublasLtMatmulDescSetAttribute(p->desc, LT_DESC_TRANSB, &transb, sizeof(transb)), "cublasLtMatmulDescSetAttribute(TRANSB)");
	LT_TRY(b->cublasLtMatrixLayoutCreate(&p->a, a.type, a.rows, a.cols, a.ld), "cublasLtMatrixLayoutCreate(A)");
	LT_TRY(b->cublasLtMatrixLayoutCreate(&p->b, bb.type, bb.rows, bb.cols, bb.ld), "cublasLtMatrixLayoutCreate(B)");
	LT_TRY(b->cublasLtMatrixLayoutCreate(&p->c, c.type, c.rows, c.cols, c.ld), "cublasLtMatrixLayoutCreate(C)");
	LT_TRY(b->cublasLtMatrixLayoutCreate(&p->d, c.type, c.rows, c.cols, c.ld), "cublasLtMatrixLayoutCreate(D)");
	tt_ltHeuristic res;
	int n = 0;
	LT_TRY(tt_lt_algos(b, h, p, maxws, 1, &res, &n, failed), *failed); // the heuristic's first pick
	if (n < 1) { *failed = "cublasLtMatmulAlgoGetHeuristic (no algorithm for this shape)"; st = LT_NOT_SUPPORTED; goto fail; }
	p->algo = res.algo;
	p->workspace = res.workspaceSize;
	return 0;
fail:
	tt_lt_plan_free(b, p);
	return st;
}

int tt_lt_algos(tt_blaslt *b, tt_ltHandle h, tt_ltPlan *p, size_t maxws, int want, tt_ltHeuristic *out, int *n,
	const char **failed) {
	int st = 0;
	tt_ltPref pref = NULL;
	*n = 0;
	LT_TRY(b->cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
	unsigned long long ws = maxws;
	LT_TRY(b->cublasLtMatmulPreferenceSetAttribute(pref, LT_PREF_MAX_WS, &ws, sizeof(ws)), "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
	memset(out, 0, sizeof(*out) * (size_t)want);
	LT_TRY(b->cublasLtMatmulAlgoGetHeuristic(h, p->desc, p->a, p->b, p->c, p->d, pref, want, out, n), "cublasLtMatmulAlgoGetHeuristic");
fail:
	if (pref) b->cublasLtMatmulPreferenceDestroy(pref);
	return st;
}

int tt_lt_plan_free(tt_blaslt *b, tt_ltPlan *p) {
	int st = 0, s;
	tt_ltLayout ls[4] = {p->a, p->b, p->c, p->d};
	for (int i = 0; i < 4; i++)
		if (ls[i] && (s = b->cublasLtMatrixLayoutDestroy(ls[i])) != 0 && st == 0) st = s;
	if (p->desc && (s = b->cublasLtMatmulDescDestroy(p->desc)) != 0 && st == 0) st = s;
	memset(p, 0, sizeof(*p));
	return st;
}

int tt_lt_matmul(tt_blaslt *b, tt_ltHandle h, tt_ltPlan *p, float alpha, float beta, unsigned long long A,
	unsigned long long B, unsigned long long CD, unsigned long long ws, size_t wssize, void *stream) {
	// Device addresses arrive as integers (CUdeviceptr) so that Go never
	// holds them as pointers.
	return b->cublasLtMatmul(h, p->desc, &alpha, (const void *)A, p->a, (const void *)B, p->b, &beta,
		(const void *)CD, p->c, (void *)CD, p->d, &p->algo, (void *)ws, wssize, stream);
}
