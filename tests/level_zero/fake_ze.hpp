// The control interface of the fake Level Zero driver (fake_ze.cpp), for tests that open it
// with dlopen beside the backend (the same file, so the same instance). Plain C entry points.
#pragma once

#include <cstddef>

extern "C" {
// Back to the defaults: no failure armed, two sub-devices, the call log cleared (allocations
// stay).
void fakeze_reset(void);
// Arms a failure until the next reset: "module_build" (zeModuleCreate fails with a build log), "oom" (every
// device allocation fails as out of device memory), "device_lost" (every later command and
// synchronisation returns ZE_RESULT_ERROR_DEVICE_LOST), "slow_events" (an event a command signals
// stays not ready until the host waits for it: work still running on the device),
// "no_list_queries" (the 1.9 command-list queries return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, as
// a new loader does over an older driver), "slow_appends" (every append keeps its list in use
// 200 us longer, widening the window in which fakeze_concurrent_appends sees a race). Returns 0
// when `what` is unknown.
int fakeze_inject(const char* what);
// How many times entry point `name` ("zeModuleCreate") was called since the last reset.
int fakeze_count(const char* name);
// The device handle argument of the last zeCommandListCreateImmediate: 0 the root device,
// 1 + i sub-device i.
int fakeze_last_list_device(void);
// How many commands were appended to command list `list` (a ze_command_list_handle_t); -1 when
// it is not a live list.
int fakeze_list_appends(void* list);
// Whether command list `list` was made with ZE_COMMAND_QUEUE_FLAG_IN_ORDER: 1 yes, 0 no, -1 when
// it is not a live list.
int fakeze_list_in_order(void* list);
// How many commands since the last reset were appended to a list not made in order after another
// command with no barrier between: a driver may start such a command before the one before it
// completes (a kernel reading a buffer its stream's copy is still writing).
int fakeze_unordered_appends(void);
// How many appends since the last reset began while another append to the same command list was
// in progress on another thread (Level Zero forbids it; the first is also reported on stderr).
int fakeze_concurrent_appends(void);
// How many sub-devices the root device reports from now on: 2 (the default) or 0.
void fakeze_set_tiles(int tiles);
// Bytes of device and host memory allocated and not freed.
size_t fakeze_live_bytes(void);
}
