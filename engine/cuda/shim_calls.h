// Code generated from shim.h by gen_calls.py; DO NOT EDIT.
// cgo cannot call C function pointers, so every table entry gets a
// static inline caller.
#ifndef TRENI_CUDA_CALLS_H
#define TRENI_CUDA_CALLS_H
#include "shim.h"

static inline tt_CUresult tt_cuInit(tt_cuda *c, unsigned int a0) { return c->cuInit(a0); }
static inline tt_CUresult tt_cuDriverGetVersion(tt_cuda *c, int * a0) { return c->cuDriverGetVersion(a0); }
static inline tt_CUresult tt_cuGetErrorName(tt_cuda *c, tt_CUresult a0, const char ** a1) { return c->cuGetErrorName(a0, a1); }
static inline tt_CUresult tt_cuGetErrorString(tt_cuda *c, tt_CUresult a0, const char ** a1) { return c->cuGetErrorString(a0, a1); }
static inline tt_CUresult tt_cuDeviceGetCount(tt_cuda *c, int * a0) { return c->cuDeviceGetCount(a0); }
static inline tt_CUresult tt_cuDeviceGet(tt_cuda *c, tt_CUdevice * a0, int a1) { return c->cuDeviceGet(a0, a1); }
static inline tt_CUresult tt_cuDeviceGetName(tt_cuda *c, char * a0, int a1, tt_CUdevice a2) { return c->cuDeviceGetName(a0, a1, a2); }
static inline tt_CUresult tt_cuDeviceTotalMem(tt_cuda *c, size_t * a0, tt_CUdevice a1) { return c->cuDeviceTotalMem(a0, a1); }
static inline tt_CUresult tt_cuDeviceGetAttribute(tt_cuda *c, int * a0, int a1, tt_CUdevice a2) { return c->cuDeviceGetAttribute(a0, a1, a2); }
static inline tt_CUresult tt_cuDevicePrimaryCtxRetain(tt_cuda *c, tt_CUcontext * a0, tt_CUdevice a1) { return c->cuDevicePrimaryCtxRetain(a0, a1); }
static inline tt_CUresult tt_cuDevicePrimaryCtxRelease(tt_cuda *c, tt_CUdevice a0) { return c->cuDevicePrimaryCtxRelease(a0); }
static inline tt_CUresult tt_cuCtxSetCurrent(tt_cuda *c, tt_CUcontext a0) { return c->cuCtxSetCurrent(a0); }
static inline tt_CUresult tt_cuCtxSynchronize(tt_cuda *c) { return c->cuCtxSynchronize(); }
static inline tt_CUresult tt_cuMemGetInfo(tt_cuda *c, size_t * a0, size_t * a1) { return c->cuMemGetInfo(a0, a1); }
static inline tt_CUresult tt_cuMemAlloc(tt_cuda *c, tt_CUdeviceptr * a0, size_t a1) { return c->cuMemAlloc(a0, a1); }
static inline tt_CUresult tt_cuMemFree(tt_cuda *c, tt_CUdeviceptr a0) { return c->cuMemFree(a0); }
static inline tt_CUresult tt_cuMemHostAlloc(tt_cuda *c, void ** a0, size_t a1, unsigned int a2) { return c->cuMemHostAlloc(a0, a1, a2); }
static inline tt_CUresult tt_cuMemFreeHost(tt_cuda *c, void * a0) { return c->cuMemFreeHost(a0); }
static inline tt_CUresult tt_cuMemHostRegister(tt_cuda *c, void * a0, size_t a1, unsigned int a2) { return c->cuMemHostRegister(a0, a1, a2); }
static inline tt_CUresult tt_cuMemHostUnregister(tt_cuda *c, void * a0) { return c->cuMemHostUnregister(a0); }
static inline tt_CUresult tt_cuMemcpyHtoD(tt_cuda *c, tt_CUdeviceptr a0, const void * a1, size_t a2) { return c->cuMemcpyHtoD(a0, a1, a2); }
static inline tt_CUresult tt_cuMemcpyDtoH(tt_cuda *c, void * a0, tt_CUdeviceptr a1, size_t a2) { return c->cuMemcpyDtoH(a0, a1, a2); }
static inline tt_CUresult tt_cuMemcpyDtoD(tt_cuda *c, tt_CUdeviceptr a0, tt_CUdeviceptr a1, size_t a2) { return c->cuMemcpyDtoD(a0, a1, a2); }
static inline tt_CUresult tt_cuMemcpyHtoDAsync(tt_cuda *c, tt_CUdeviceptr a0, const void * a1, size_t a2, tt_CUstream a3) { return c->cuMemcpyHtoDAsync(a0, a1, a2, a3); }
static inline tt_CUresult tt_cuMemcpyDtoHAsync(tt_cuda *c, void * a0, tt_CUdeviceptr a1, size_t a2, tt_CUstream a3) { return c->cuMemcpyDtoHAsync(a0, a1, a2, a3); }
static inline tt_CUresult tt_cuMemcpyDtoDAsync(tt_cuda *c, tt_CUdeviceptr a0, tt_CUdeviceptr a1, size_t a2, tt_CUstream a3) { return c->cuMemcpyDtoDAsync(a0, a1, a2, a3); }
static inline tt_CUresult tt_cuMemsetD8Async(tt_cuda *c, tt_CUdeviceptr a0, unsigned char a1, size_t a2, tt_CUstream a3) { return c->cuMemsetD8Async(a0, a1, a2, a3); }
static inline tt_CUresult tt_cuStreamCreate(tt_cuda *c, tt_CUstream * a0, unsigned int a1) { return c->cuStreamCreate(a0, a1); }
static inline tt_CUresult tt_cuStreamDestroy(tt_cuda *c, tt_CUstream a0) { return c->cuStreamDestroy(a0); }
static inline tt_CUresult tt_cuStreamSynchronize(tt_cuda *c, tt_CUstream a0) { return c->cuStreamSynchronize(a0); }
static inline tt_CUresult tt_cuStreamWaitEvent(tt_cuda *c, tt_CUstream a0, tt_CUevent a1, unsigned int a2) { return c->cuStreamWaitEvent(a0, a1, a2); }
static inline tt_CUresult tt_cuEventCreate(tt_cuda *c, tt_CUevent * a0, unsigned int a1) { return c->cuEventCreate(a0, a1); }
static inline tt_CUresult tt_cuEventDestroy(tt_cuda *c, tt_CUevent a0) { return c->cuEventDestroy(a0); }
static inline tt_CUresult tt_cuEventRecord(tt_cuda *c, tt_CUevent a0, tt_CUstream a1) { return c->cuEventRecord(a0, a1); }
static inline tt_CUresult tt_cuEventSynchronize(tt_cuda *c, tt_CUevent a0) { return c->cuEventSynchronize(a0); }
static inline tt_CUresult tt_cuEventElapsedTime(tt_cuda *c, float * a0, tt_CUevent a1, tt_CUevent a2) { return c->cuEventElapsedTime(a0, a1, a2); }
static inline tt_CUresult tt_cuModuleLoadData(tt_cuda *c, tt_CUmodule * a0, const void * a1) { return c->cuModuleLoadData(a0, a1); }
static inline tt_CUresult tt_cuModuleUnload(tt_cuda *c, tt_CUmodule a0) { return c->cuModuleUnload(a0); }
static inline tt_CUresult tt_cuModuleGetFunction(tt_cuda *c, tt_CUfunction * a0, tt_CUmodule a1, const char * a2) { return c->cuModuleGetFunction(a0, a1, a2); }
static inline tt_CUresult tt_cuOccupancyMaxActiveBlocksPerMultiprocessor(tt_cuda *c, int * a0, tt_CUfunction a1, int a2, size_t a3) { return c->cuOccupancyMaxActiveBlocksPerMultiprocessor(a0, a1, a2, a3); }
static inline tt_CUresult tt_cuFuncSetAttribute(tt_cuda *c, tt_CUfunction a0, int a1, int a2) { return c->cuFuncSetAttribute(a0, a1, a2); }
static inline tt_CUresult tt_cuLaunchKernel(tt_cuda *c, tt_CUfunction a0, unsigned int a1, unsigned int a2, unsigned int a3, unsigned int a4, unsigned int a5, unsigned int a6, unsigned int a7, tt_CUstream a8, void ** a9, void ** a10) { return c->cuLaunchKernel(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10); }
static inline tt_CUresult tt_cuLaunchKernelEx(tt_cuda *c, const tt_CUlaunchConfig * a0, tt_CUfunction a1, void ** a2, void ** a3) { return c->cuLaunchKernelEx(a0, a1, a2, a3); }
static inline tt_CUresult tt_cuStreamBeginCapture(tt_cuda *c, tt_CUstream a0, int a1) { return c->cuStreamBeginCapture(a0, a1); }
static inline tt_CUresult tt_cuStreamEndCapture(tt_cuda *c, tt_CUstream a0, tt_CUgraph * a1) { return c->cuStreamEndCapture(a0, a1); }
static inline tt_CUresult tt_cuGraphInstantiate(tt_cuda *c, tt_CUgraphExec * a0, tt_CUgraph a1, unsigned long long a2) { return c->cuGraphInstantiate(a0, a1, a2); }
static inline tt_CUresult tt_cuGraphLaunch(tt_cuda *c, tt_CUgraphExec a0, tt_CUstream a1) { return c->cuGraphLaunch(a0, a1); }
static inline tt_CUresult tt_cuGraphExecDestroy(tt_cuda *c, tt_CUgraphExec a0) { return c->cuGraphExecDestroy(a0); }
static inline tt_CUresult tt_cuGraphDestroy(tt_cuda *c, tt_CUgraph a0) { return c->cuGraphDestroy(a0); }
static inline tt_CUresult tt_cuMemGetAllocationGranularity(tt_cuda *c, size_t * a0, const tt_CUmemAllocationProp * a1, int a2) { return c->cuMemGetAllocationGranularity(a0, a1, a2); }
static inline tt_CUresult tt_cuMemAddressReserve(tt_cuda *c, tt_CUdeviceptr * a0, size_t a1, size_t a2, tt_CUdeviceptr a3, unsigned long long a4) { return c->cuMemAddressReserve(a0, a1, a2, a3, a4); }
static inline tt_CUresult tt_cuMemAddressFree(tt_cuda *c, tt_CUdeviceptr a0, size_t a1) { return c->cuMemAddressFree(a0, a1); }
static inline tt_CUresult tt_cuMemCreate(tt_cuda *c, tt_CUmemGenericAllocationHandle * a0, size_t a1, const tt_CUmemAllocationProp * a2, unsigned long long a3) { return c->cuMemCreate(a0, a1, a2, a3); }
static inline tt_CUresult tt_cuMemRelease(tt_cuda *c, tt_CUmemGenericAllocationHandle a0) { return c->cuMemRelease(a0); }
static inline tt_CUresult tt_cuMemMap(tt_cuda *c, tt_CUdeviceptr a0, size_t a1, size_t a2, tt_CUmemGenericAllocationHandle a3, unsigned long long a4) { return c->cuMemMap(a0, a1, a2, a3, a4); }
static inline tt_CUresult tt_cuMemUnmap(tt_cuda *c, tt_CUdeviceptr a0, size_t a1) { return c->cuMemUnmap(a0, a1); }
static inline tt_CUresult tt_cuMemSetAccess(tt_cuda *c, tt_CUdeviceptr a0, size_t a1, const tt_CUmemAccessDesc * a2, size_t a3) { return c->cuMemSetAccess(a0, a1, a2, a3); }

#endif
