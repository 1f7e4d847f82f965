// What the backend reports about the driver: on a machine without one, a reason that names
// libcuda; with one, a version at least the minimum. Either way the CPU backend still works.
#include <doctest/doctest.h>

#include <halcyon/halcyon.hpp>

#include "cuda_driver.hpp"

#include <cstdlib>
#include <string>

TEST_CASE("driver: loaded, or unavailable with the reason") {
  std::string why;
  const halcyon::cuda::Driver* d = halcyon::cuda::load_driver(&why);
  if (d) {
    CHECK(d->version >= halcyon::cuda::kMinDriverVersion);
    CHECK(bool(d->cuLaunchKernel));
    MESSAGE("driver for CUDA " << halcyon::cuda::version_string(d->version));
  } else {
    CHECK_FALSE(why.empty());
    const bool names_cause = why.find("libcuda") != std::string::npos || why.find("cuInit") != std::string::npos ||
                             why.find("driver") != std::string::npos;
    CHECK_MESSAGE(names_cause, why);
    MESSAGE("no driver: " << why);
  }
}

TEST_CASE("driver: the registry records cuda with a reason, and the CPU device still opens") {
  auto records = halcyon::backend_records();
  REQUIRE(records.ok());
  bool found = false;
  for (auto& r : *records) {
    if (std::string(r.name) != "cuda") continue;
    found = true;
    if (r.state == HAL_BACKEND_UNAVAILABLE) {
      CHECK(std::string(r.reason).size() > 10);
      hal_device dev = nullptr;
      hal_error* e = hal_device_open("cuda:0", &dev);
      REQUIRE(e != nullptr);
      CHECK(hal_error_status(e) == HAL_UNAVAILABLE);
      CHECK(std::string(hal_error_message(e)).find(r.reason) != std::string::npos);
      hal_error_free(e);
    } else {
      CHECK(r.state == HAL_BACKEND_AVAILABLE);
    }
  }
  CHECK(found);
  auto cpu = halcyon::Device::open("cpu:0");
  CHECK(cpu.ok());
}

TEST_CASE("driver: the cuda_driver number formatting") {
  CHECK(halcyon::cuda::version_string(13000) == "13.0");
  CHECK(halcyon::cuda::version_string(12040) == "12.4");
}
