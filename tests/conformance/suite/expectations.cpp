// What each backend declares about itself, in one place. A line either marks tests that are
// not run on that backend ("unsupported: the reason") or tests that run and are known to
// fail ("expected failure: the reason"). A declared expected failure that passes is
// reported as an unexpected pass and fails the run, so that stale lines get removed.
//
// Tests that need a capability the device does not advertise (module.host, events.timing,
// partition.*) are reported unsupported without a line here; declare only what the
// capability tags cannot say. See docs/conformance.md.
#include <halcyon/cts/cts.hpp>

namespace halcyon::cts {

const std::vector<BackendExpectations>& declared_expectations() {
  [[maybe_unused]] constexpr auto unsupported = Expectation::Kind::unsupported;
  [[maybe_unused]] constexpr auto expected_failure = Expectation::Kind::expected_failure;
  static const std::vector<BackendExpectations> table = {
      // The reference backend: everything applies and must pass.
      {"cpu", {}},
      // A vendor adds its backend here, for example:
      //   {"acme", {{unsupported, "api.copy.largest", "the simulator has 64 MiB of memory"},
      //             {expected_failure, "numeric.moe_gate.*", "bug ACME-123: bias is ignored"}}},
  };
  return table;
}

}  // namespace halcyon::cts
