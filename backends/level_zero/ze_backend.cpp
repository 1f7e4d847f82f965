// oneAPI Level Zero backend: the hal_backend_api table. The loader (libze_loader.so.1, or the
// file named by the backend option ze.loader) is opened at run time through the symbol table of
// ze_symbols.hpp, so one binary runs with and without it; modules are SPIR-V. What was verified
// where: docs/backends/level_zero.md.
#include "ze_internal.hpp"

namespace {

namespace ze = halcyon::ze;

const hal_backend_api kApi = {
    sizeof(hal_backend_api),
    nullptr,
    HAL_ABI_MAJOR,
    HAL_ABI_MINOR,
    "ze",
    "oneAPI Level Zero (loader opened at run time; SPIR-V modules)",
    HAL_BACKEND_FN(ze::create),
    HAL_BACKEND_FN(ze::destroy),
    HAL_BACKEND_FN(ze::device_count),
    nullptr,  // device_resolve: decimal indices
    HAL_BACKEND_FN(ze::device_open),
    HAL_BACKEND_FN(ze::device_close),
    HAL_BACKEND_FN(ze::device_info),
    HAL_BACKEND_FN(ze::buffer_create),
    HAL_BACKEND_FN(ze::buffer_destroy),
    HAL_BACKEND_FN(ze::stream_create),
    HAL_BACKEND_FN(ze::stream_destroy),
    HAL_BACKEND_FN(ze::stream_synchronize),
    HAL_BACKEND_FN(ze::stream_write),
    HAL_BACKEND_FN(ze::stream_read),
    HAL_BACKEND_FN(ze::stream_copy),
    HAL_BACKEND_FN(ze::stream_fill),
    HAL_BACKEND_FN(ze::stream_wait_event),
    HAL_BACKEND_FN(ze::stream_launch),
    HAL_BACKEND_FN(ze::event_create),
    HAL_BACKEND_FN(ze::event_destroy),
    HAL_BACKEND_FN(ze::event_record),
    HAL_BACKEND_FN(ze::event_query),
    HAL_BACKEND_FN(ze::event_synchronize),
    HAL_BACKEND_FN(ze::event_elapsed_ms),
    HAL_BACKEND_FN(ze::module_load),
    HAL_BACKEND_FN(ze::module_destroy),
    HAL_BACKEND_FN(ze::kernel_get),
    HAL_BACKEND_FN(ze::kernel_destroy),
    HAL_BACKEND_FN(ze::partition_split),
    HAL_BACKEND_FN(ze::partition_destroy),
    nullptr,  // tensor_map_encode: no tensor copy engine is exposed through Level Zero
    HAL_BACKEND_FN(ze::device_can_run),
    HAL_BACKEND_FN(ze::partition_caps),
    HAL_BACKEND_FN(ze::buffer_import),
    nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,  // no communicator yet
    HAL_BACKEND_FN(ze::stream_import),
    HAL_BACKEND_FN(ze::stream_native),
};

}  // namespace

extern "C" const hal_backend_api* halcyon_backend_api_level_zero(void) { return &kApi; }
