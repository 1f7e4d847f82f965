// The control interface of the fake HIP runtime (fake_hip.cpp), for tests that open it with
// dlopen beside the backend (the same file, so the same instance). Plain C entry points.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {
// Back to the defaults: no failure armed, the call counts cleared (allocations stay).
void fakehip_reset(void);
// Arms a failure until the next reset: "oom" (every hipMalloc fails with hipErrorOutOfMemory),
// "no_stream_device" (hipStreamGetDevice is reported missing: calls return
// hipErrorNotSupported). Returns 0 when `what` is unknown.
int fakehip_inject(const char* what);
// How many times entry point `name` ("hipModuleLaunchKernel") was called since the last reset.
int fakehip_count(const char* name);
// The CU mask of the last stream hipExtStreamCreateWithCUMask made: copies up to `cap` words
// into `out` and returns the mask's length in words (0: none made since the reset).
int fakehip_last_cu_mask(uint32_t* out, int cap);
// The grid's x size of the last hipModuleLaunchKernel (0: none since the reset).
unsigned fakehip_last_grid_x(void);
// The stream the last hipModuleLaunchKernel was given (null: the null stream, or none since the
// reset).
void* fakehip_last_launch_stream(void);
// Bytes of device and pinned host memory allocated and not freed.
size_t fakehip_live_bytes(void);
}
