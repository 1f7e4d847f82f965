// A test-only backend: the CPU backend's table under another URI scheme (CTS_BACKEND_NAME),
// so that operator implementations can be registered for it alone (OpImpl::backend).
#include <halcyon/hal.h>

extern "C" const hal_backend_api* halcyon_backend_api_cpu(void);

extern "C" HAL_API const hal_backend_api* halcyon_backend_plugin(void) {
  static const hal_backend_api api = [] {
    hal_backend_api a = *halcyon_backend_api_cpu();
    a.name = CTS_BACKEND_NAME;
    a.description = "test-only: the CPU backend under another name, for broken operator implementations";
    return a;
  }();
  return &api;
}
