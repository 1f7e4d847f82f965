// The row type of the generated table of embedded code objects (embed.cmake).
#pragma once

#include <cstddef>

namespace halcyon::gcn {
struct EmbeddedImage {
  const char* name;
  const char* target;
  const unsigned char* data;
  size_t size;
  const char* contract;
};
}  // namespace halcyon::gcn
