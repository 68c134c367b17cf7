// Hand-declared prototypes of the cuBLASLt subset treni-top uses, resolved
// at run time with dlopen/dlsym like the driver (shim.h). Handles are
// pointers, enums are int, statuses are int (cublasStatus_t).
#ifndef TRENI_BLAS_SHIM_H
#define TRENI_BLAS_SHIM_H

#include <stddef.h>

typedef void *tt_ltHandle;
typedef void *tt_ltMatmulDesc;
typedef void *tt_ltLayout;
typedef void *tt_ltPref;

// cublasLtMatmulAlgo_t and cublasLtMatmulHeuristicResult_t, by ABI.
typedef struct { unsigned long long data[8]; } tt_ltAlgo;
typedef struct {
	tt_ltAlgo algo;
	size_t workspaceSize;
	int state;
	float wavesCount;
	int reserved[4];
} tt_ltHeuristic;

typedef struct tt_blaslt {
	void *lib;
	size_t (*cublasLtGetVersion)(void);
	const char *(*cublasLtGetStatusName)(int);   // optional (older releases lack it)
	const char *(*cublasLtGetStatusString)(int); // optional
	int (*cublasLtCreate)(tt_ltHandle *);
	int (*cublasLtDestroy)(tt_ltHandle);
	int (*cublasLtMatmulDescCreate)(tt_ltMatmulDesc *, int, int);
	int (*cublasLtMatmulDescDestroy)(tt_ltMatmulDesc);
	int (*cublasLtMatmulDescSetAttribute)(tt_ltMatmulDesc, int, const void *, size_t);
	int (*cublasLtMatrixLayoutCreate)(tt_ltLayout *, int, unsigned long long, unsigned long long, long long);
	int (*cublasLtMatrixLayoutDestroy)(tt_ltLayout);
	int (*cublasLtMatmulPreferenceCreate)(tt_ltPref *);
	int (*cublasLtMatmulPreferenceDestroy)(tt_ltPref);
	int (*cublasLtMatmulPreferenceSetAttribute)(tt_ltPref, int, const void *, size_t);
	int (*cublasLtMatmulAlgoGetHeuristic)(tt_ltHandle, tt_ltMatmulDesc, tt_ltLayout, tt_ltLayout, tt_ltLayout,
		tt_ltLayout, tt_ltPref, int, tt_ltHeuristic *, int *);
	// 16 arguments: handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc,
	// D, Ddesc, algo, workspace, workspace size, stream.
	int (*cublasLtMatmul)(tt_ltHandle, tt_ltMatmulDesc, const void *, const void *, tt_ltLayout, const void *,
		tt_ltLayout, const void *, const void *, tt_ltLayout, void *, tt_ltLayout, const tt_ltAlgo *, void *,
		size_t, void *);
} tt_blaslt;

// tt_ltLayoutSpec is one matrix's column-major description.
typedef struct {
	int type; // cudaDataType_t
	unsigned long long rows, cols;
	long long ld;
} tt_ltLayoutSpec;

// tt_ltPlan is a matmul descriptor, its four layouts and the chosen
// algorithm, built once per shape and kept in C memory.
typedef struct {
	tt_ltMatmulDesc desc;
	tt_ltLayout a, b, c, d;
	tt_ltAlgo algo;
	size_t workspace;
} tt_ltPlan;

tt_blaslt *tt_blaslt_open(const char *path, char *err, size_t errlen);
void tt_blaslt_close(tt_blaslt *b);

// tt_lt_plan builds p (compute 32F, scale 32F) for D = op(A)·op(B) + beta·C
// with C and D sharing spec c. On failure it returns the status and sets
// *failed to the call's name; whatever was created is destroyed.
int tt_lt_plan(tt_blaslt *b, tt_ltHandle h, tt_ltPlan *p, int transa, int transb, tt_ltLayoutSpec a,
	tt_ltLayoutSpec bb, tt_ltLayoutSpec c, size_t maxws, const char **failed);
// tt_lt_algos asks cuBLASLt's heuristic for up to want algorithms for
// plan p's shape within maxws bytes of workspace, best first, into out;
// *n is how many it found.
int tt_lt_algos(tt_blaslt *b, tt_ltHandle h, tt_ltPlan *p, size_t maxws, int want, tt_ltHeuristic *out, int *n,
	const char **failed);
// tt_lt_plan_free destroys what a plan holds and returns the first failure.
int tt_lt_plan_free(tt_blaslt *b, tt_ltPlan *p);

// tt_lt_matmul runs a plan; alpha and beta are passed by value and handed to
// cuBLASLt as host pointers (read before the call returns, so a captured
// graph keeps their values).
int tt_lt_matmul(tt_blaslt *b, tt_ltHandle h, tt_ltPlan *p, float alpha, float beta, unsigned long long A,
	unsigned long long B, unsigned long long CD, unsigned long long ws, size_t wssize, void *stream);

static inline int tt_ltCreate(tt_blaslt *b, tt_ltHandle *h) { return b->cublasLtCreate(h); }
static inline int tt_ltDestroy(tt_blaslt *b, tt_ltHandle h) { return b->cublasLtDestroy(h); }
static inline size_t tt_ltGetVersion(tt_blaslt *b) { return b->cublasLtGetVersion(); }
static inline const char *tt_ltStatusName(tt_blaslt *b, int s) {
	return b->cublasLtGetStatusName ? b->cublasLtGetStatusName(s) : 0;
}
static inline const char *tt_ltStatusString(tt_blaslt *b, int s) {
	return b->cublasLtGetStatusString ? b->cublasLtGetStatusString(s) : 0;
}

#endif
