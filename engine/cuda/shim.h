// Hand-declared prototypes of the CUDA driver API subset treni-top uses,
// resolved at run time with dlopen/dlsym so that the binary builds without a
// CUDA toolkit and runs on machines without one (as go-nvml does for NVML).
// Types are declared by their ABI: handles are pointers, CUdeviceptr is a
// 64-bit integer, enums are int.
#ifndef TRENI_CUDA_SHIM_H
#define TRENI_CUDA_SHIM_H

#include <stddef.h>

typedef int tt_CUresult;
typedef int tt_CUdevice;
typedef void *tt_CUcontext;
typedef unsigned long long tt_CUdeviceptr;
typedef void *tt_CUstream;
typedef void *tt_CUevent;
typedef void *tt_CUmodule;
typedef void *tt_CUfunction;
typedef void *tt_CUgraph;
typedef void *tt_CUgraphExec;

// cuLaunchKernelEx's launch description (CUlaunchConfig and
// CUlaunchAttribute of cuda.h, CUDA 12.0 on): the attribute value is a
// 64-byte union, of which PDL uses the first int.
typedef struct tt_CUlaunchAttribute {
	int id;
	char pad[4];
	char value[64];
} tt_CUlaunchAttribute;
typedef struct tt_CUlaunchConfig {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	tt_CUstream hStream;
	tt_CUlaunchAttribute *attrs;
	unsigned int numAttrs;
} tt_CUlaunchConfig;

// The virtual memory management API's descriptions (cuda.h, CUDA 10.2
// on): an allocation's properties (CUmemAllocationProp: pinned device
// memory on one device) and an access grant (CUmemAccessDesc).
typedef unsigned long long tt_CUmemGenericAllocationHandle;
typedef struct tt_CUmemLocation {
	int type; // CU_MEM_LOCATION_TYPE_DEVICE = 1
	int id;   // the device ordinal
} tt_CUmemLocation;
typedef struct tt_CUmemAllocationProp {
	int type;                 // CU_MEM_ALLOCATION_TYPE_PINNED = 1
	int requestedHandleTypes; // CU_MEM_HANDLE_TYPE_NONE = 0
	tt_CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} tt_CUmemAllocationProp;
typedef struct tt_CUmemAccessDesc {
	tt_CUmemLocation location;
	int flags; // CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
} tt_CUmemAccessDesc;

typedef struct tt_cuda {
	void *lib;
	tt_CUresult (*cuInit)(unsigned int);
	tt_CUresult (*cuDriverGetVersion)(int *);
	tt_CUresult (*cuGetErrorName)(tt_CUresult, const char **);
	tt_CUresult (*cuGetErrorString)(tt_CUresult, const char **);
	tt_CUresult (*cuDeviceGetCount)(int *);
	tt_CUresult (*cuDeviceGet)(tt_CUdevice *, int);
	tt_CUresult (*cuDeviceGetName)(char *, int, tt_CUdevice);
	tt_CUresult (*cuDeviceTotalMem)(size_t *, tt_CUdevice);
	tt_CUresult (*cuDeviceGetAttribute)(int *, int, tt_CUdevice);
	tt_CUresult (*cuDevicePrimaryCtxRetain)(tt_CUcontext *, tt_CUdevice);
	tt_CUresult (*cuDevicePrimaryCtxRelease)(tt_CUdevice);
	tt_CUresult (*cuCtxSetCurrent)(tt_CUcontext);
	tt_CUresult (*cuCtxSynchronize)(void);
	tt_CUresult (*cuMemGetInfo)(size_t *, size_t *);
	tt_CUresult (*cuMemAlloc)(tt_CUdeviceptr *, size_t);
	tt_CUresult (*cuMemFree)(tt_CUdeviceptr);
	tt_CUresult (*cuMemHostAlloc)(void **, size_t, unsigned int);
	tt_CUresult (*cuMemFreeHost)(void *);
	tt_CUresult (*cuMemHostRegister)(void *, size_t, unsigned int);
	tt_CUresult (*cuMemHostUnregister)(void *);
	tt_CUresult (*cuMemcpyHtoD)(tt_CUdeviceptr, const void *, size_t);
	tt_CUresult (*cuMemcpyDtoH)(void *, tt_CUdeviceptr, size_t);
	tt_CUresult (*cuMemcpyDtoD)(tt_CUdeviceptr, tt_CUdeviceptr, size_t);
	tt_CUresult (*cuMemcpyHtoDAsync)(tt_CUdeviceptr, const void *, size_t, tt_CUstream);
	tt_CUresult (*cuMemcpyDtoHAsync)(void *, tt_CUdeviceptr, size_t, tt_CUstream);
	tt_CUresult (*cuMemcpyDtoDAsync)(tt_CUdeviceptr, tt_CUdeviceptr, size_t, tt_CUstream);
	tt_CUresult (*cuMemsetD8Async)(tt_CUdeviceptr, unsigned char, size_t, tt_CUstream);
	tt_CUresult (*cuStreamCreate)(tt_CUstream *, unsigned int);
	tt_CUresult (*cuStreamDestroy)(tt_CUstream);
	tt_CUresult (*cuStreamSynchronize)(tt_CUstream);
	tt_CUresult (*cuStreamWaitEvent)(tt_CUstream, tt_CUevent, unsigned int);
	tt_CUresult (*cuEventCreate)(tt_CUevent *, unsigned int);
	tt_CUresult (*cuEventDestroy)(tt_CUevent);
	tt_CUresult (*cuEventRecord)(tt_CUevent, tt_CUstream);
	tt_CUresult (*cuEventSynchronize)(tt_CUevent);
	tt_CUresult (*cuEventElapsedTime)(float *, tt_CUevent, tt_CUevent);
	tt_CUresult (*cuModuleLoadData)(tt_CUmodule *, const void *);
	tt_CUresult (*cuModuleUnload)(tt_CUmodule);
	tt_CUresult (*cuModuleGetFunction)(tt_CUfunction *, tt_CUmodule, const char *);
	tt_CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, tt_CUfunction, int, size_t);
	tt_CUresult (*cuFuncSetAttribute)(tt_CUfunction, int, int);
	tt_CUresult (*cuLaunchKernel)(tt_CUfunction, unsigned int, unsigned int, unsigned int,
		unsigned int, unsigned int, unsigned int, unsigned int, tt_CUstream, void **, void **);
	// Optional (NULL on drivers before CUDA 12.0): programmatic dependent
	// launch goes through it (tt_launch_pdl).
	tt_CUresult (*cuLaunchKernelEx)(const tt_CUlaunchConfig *, tt_CUfunction, void **, void **);
	tt_CUresult (*cuStreamBeginCapture)(tt_CUstream, int);
	tt_CUresult (*cuStreamEndCapture)(tt_CUstream, tt_CUgraph *);
	tt_CUresult (*cuGraphInstantiate)(tt_CUgraphExec *, tt_CUgraph, unsigned long long);
	tt_CUresult (*cuGraphLaunch)(tt_CUgraphExec, tt_CUstream);
	tt_CUresult (*cuGraphExecDestroy)(tt_CUgraphExec);
	tt_CUresult (*cuGraphDestroy)(tt_CUgraph);
	// Optional (NULL where the driver lacks them): the virtual memory
	// management API, through which sleep mode keeps the weights' and KV
	// pool's addresses while their memory is given back (vmm.go).
	tt_CUresult (*cuMemGetAllocationGranularity)(size_t *, const tt_CUmemAllocationProp *, int);
	tt_CUresult (*cuMemAddressReserve)(tt_CUdeviceptr *, size_t, size_t, tt_CUdeviceptr, unsigned long long);
	tt_CUresult (*cuMemAddressFree)(tt_CUdeviceptr, size_t);
	tt_CUresult (*cuMemCreate)(tt_CUmemGenericAllocationHandle *, size_t, const tt_CUmemAllocationProp *, unsigned long long);
	tt_CUresult (*cuMemRelease)(tt_CUmemGenericAllocationHandle);
	tt_CUresult (*cuMemMap)(tt_CUdeviceptr, size_t, size_t, tt_CUmemGenericAllocationHandle, unsigned long long);
	tt_CUresult (*cuMemUnmap)(tt_CUdeviceptr, size_t);
	tt_CUresult (*cuMemSetAccess)(tt_CUdeviceptr, size_t, const tt_CUmemAccessDesc *, size_t);
} tt_cuda;

// tt_cuda_open loads the driver library at path and resolves every symbol.
// It returns NULL and writes a message into err when anything is missing.
tt_cuda *tt_cuda_open(const char *path, char *err, size_t errlen);
void tt_cuda_close(tt_cuda *c);
// tt_launch_pdl launches f like cuLaunchKernel with programmatic stream
// serialization allowed (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION):
// the grid may start before the previous kernel in the stream has
// finished, and waits for it with griddepcontrol.wait. Needs
// c->cuLaunchKernelEx.
tt_CUresult tt_launch_pdl(tt_cuda *c, tt_CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
	unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem, tt_CUstream s, void **params);
// tt_lib_path writes the path the loader resolved for a loaded library.
int tt_lib_path(void *lib, char *out, size_t outlen);
// tt_dlopen_probe tries to dlopen path and reports the resolved path (for
// doctor); it closes the library again.
int tt_dlopen_probe(const char *path, char *out, size_t outlen, char *err, size_t errlen);

#endif
