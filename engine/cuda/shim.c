#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "shim.h"

// Versioned entry points: the _v2 names are the ABI the headers map the
// plain names to since CUDA 3.2 (64-bit sizes and device pointers);
// cuGraphInstantiate is _v2... on 11.x and plain WithFlags on 12+.
#define RESOLVE(field, name) do { \
	*(void **)(&c->field) = dlsym(c->lib, name); \
	if (!c->field) { snprintf(err, errlen, "symbol %s not found in %s", name, path); goto fail; } \
} while (0)

tt_cuda *tt_cuda_open(const char *path, char *err, size_t errlen) {
	tt_cuda *c = calloc(1, sizeof(tt_cuda));
	if (!c) { snprintf(err, errlen, "out of memory"); return NULL; }
	c->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!c->lib) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		free(c);
		return NULL;
	}
	RESOLVE(cuInit, "cuInit");
	RESOLVE(cuDriverGetVersion, "cuDriverGetVersion");
	RESOLVE(cuGetErrorName, "cuGetErrorName");
	RESOLVE(cuGetErrorString, "cuGetErrorString");
	RESOLVE(cuDeviceGetCount, "cuDeviceGetCount");
	RESOLVE(cuDeviceGet, "cuDeviceGet");
	RESOLVE(cuDeviceGetName, "cuDeviceGetName");
	RESOLVE(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	RESOLVE(cuDeviceGetAttribute, "cuDeviceGetAttribute");
	RESOLVE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	RESOLVE(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	RESOLVE(cuCtxSetCurrent, "cuCtxSetCurrent");
	RESOLVE(cuCtxSynchronize, "cuCtxSynchronize");
	RESOLVE(cuMemGetInfo, "cuMemGetInfo_v2");
	RESOLVE(cuMemAlloc, "cuMemAlloc_v2");
	RESOLVE(cuMemFree, "cuMemFree_v2");
	RESOLVE(cuMemHostAlloc, "cuMemHostAlloc");
	RESOLVE(cuMemFreeHost, "cuMemFreeHost");
	RESOLVE(cuMemHostRegister, "cuMemHostRegister_v2");
	RESOLVE(cuMemHostUnregister, "cuMemHostUnregister");
	RESOLVE(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
	RESOLVE(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	RESOLVE(cuMemcpyDtoD, "cuMemcpyDtoD_v2");
	RESOLVE(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	RESOLVE(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	RESOLVE(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	RESOLVE(cuMemsetD8Async, "cuMemsetD8Async");
	RESOLVE(cuStreamCreate, "cuStreamCreate");
	RESOLVE(cuStreamDestroy, "cuStreamDestroy_v2");
	RESOLVE(cuStreamSynchronize, "cuStreamSynchronize");
	RESOLVE(cuStreamWaitEvent, "cuStreamWaitEvent");
	RESOLVE(cuEventCreate, "cuEventCreate");
	RESOLVE(cuEventDestroy, "cuEventDestroy_v2");
	RESOLVE(cuEventRecord, "cuEventRecord");
	RESOLVE(cuEventSynchronize, "cuEventSynchronize");
	RESOLVE(cuEventElapsedTime, "cuEventElapsedTime");
	RESOLVE(cuModuleLoadData, "cuModuleLoadData");
	RESOLVE(cuModuleUnload, "cuModuleUnload");
	RESOLVE(cuModuleGetFunction, "cuModuleGetFunction");
	RESOLVE(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
	RESOLVE(cuFuncSetAttribute, "cuFuncSetAttribute");
	RESOLVE(cuLaunchKernel, "cuLaunchKernel");
	*(void **)(&c->cuLaunchKernelEx) = dlsym(c->lib, "cuLaunchKernelEx"); // optional
	RESOLVE(cuStreamBeginCapture, "cuStreamBeginCapture_v2");
	RESOLVE(cuStreamEndCapture, "cuStreamEndCapture");
	*(void **)(&c->cuGraphInstantiate) = dlsym(c->lib, "cuGraphInstantiateWithFlags");
	if (!c->cuGraphInstantiate) { snprintf(err, errlen, "symbol cuGraphInstantiateWithFlags not found in %s (driver older than CUDA 11.4)", path); goto fail; }
	RESOLVE(cuGraphLaunch, "cuGraphLaunch");
	RESOLVE(cuGraphExecDestroy, "cuGraphExecDestroy");
	RESOLVE(cuGraphDestroy, "cuGraphDestroy");
	// Optional: sleep mode needs them and says so where they are missing.
	*(void **)(&c->cuMemGetAllocationGranularity) = dlsym(c->lib, "cuMemGetAllocationGranularity");
	*(void **)(&c->cuMemAddressReserve) = dlsym(c->lib, "cuMemAddressReserve");
	*(void **)(&c->cuMemAddressFree) = dlsym(c->lib, "cuMemAddressFree");
	*(void **)(&c->cuMemCreate) = dlsym(c->lib, "cuMemCreate");
	*(void **)(&c->cuMemRelease) = dlsym(c->lib, "cuMemRelease");
	*(void **)(&c->cuMemMap) = dlsym(c->lib, "cuMemMap");
	*(void **)(&c->cuMemUnmap) = dlsym(c->lib, "cuMemUnmap");
	*(void **)(&c->cuMemSetAccess) = dlsym(c->lib, "cuMemSetAccess");
	return c;
fail:
	dlclose(c->lib);
	free(c);
	return NULL;
}

void tt_cuda_close(tt_cuda *c) {
	if (!c) return;
	// The driver is never unloaded: CUDA keeps threads and handlers that
	// outlive dlclose. Only the table is freed.
	free(c);
}

int tt_lib_path(void *lib, char *out, size_t outlen) {
	struct link_map *lm = NULL;
	if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name) return -1;
	snprintf(out, outlen, "%s", lm->l_name);
	return 0;
}

int tt_dlopen_probe(const char *path, char *out, size_t outlen, char *err, size_t errlen) {
	void *lib = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	int rc = tt_lib_path(lib, out, outlen);
	dlclose(lib);
	return rc;
}

tt_CUresult tt_launch_pdl(tt_cuda *c, tt_CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
	unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem, tt_CUstream s, void **params) {
	tt_CUlaunchAttribute attr;
	memset(&attr, 0, sizeof attr);
	attr.id = 6; // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
	int allowed = 1;
	memcpy(attr.value, &allowed, sizeof allowed);
	tt_CUlaunchConfig cfg = {gx, gy, gz, bx, by, bz, smem, s, &attr, 1};
	return c->cuLaunchKernelEx(&cfg, f, params, NULL);
}
