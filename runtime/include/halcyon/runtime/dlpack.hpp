// DLPack for the runtime's tensors, in C++ (halcyon/dlpack.h is the C form and says the rules).
#pragma once

#include <halcyon/dlpack.h>
#include <halcyon/ops/tensor.hpp>

#include <optional>
#include <string_view>

namespace halcyon::rt {

// A DLManagedTensor viewing `t` (a tensor of `device`), holding a reference on its buffer.
Result<DLManagedTensor*> to_dlpack(const Device& device, const ops::Tensor& t);

// `managed`'s memory as a tensor of `device`, without a copy; on success the tensor's buffer
// owns `managed`, on an error the caller still does. `as`: read the elements as this dtype
// (of the same size) instead of DLPack's. import_flags: hal_buffer_import_flags for the buffer.
Result<ops::Tensor> from_dlpack(const Device& device, DLManagedTensor* managed, std::string_view name,
                                std::optional<ops::DType> as = std::nullopt, uint32_t import_flags = 0);

// The DLPack device of a hal device ("cuda:1" -> kDLCUDA 1); an error for a device that DLPack
// has no type for.
Result<DLDevice> dlpack_device(const Device& device);

}  // namespace halcyon::rt
