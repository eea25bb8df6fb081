// Releasing and re-allocating a tensor's memory in place, as FSDP does with
// `untyped_storage().resize_(0)`: the Storage object stays, only its bytes come and go. Every
// tensor that views the storage (module parameters, tensors autograd saved from them) keeps
// its shape and dtype and sees the memory again once it is re-allocated and refilled.
//
// A tensor whose storage is released must not be read or written until it is re-allocated:
// its data pointer is null.
#pragma once

#include <torch/torch.h>

#include <cstddef>

namespace ooze::fsdp {

// Frees the bytes of `tensor`'s storage (no-op when already released).
void release_storage(const torch::Tensor& tensor);

// Gives `tensor`'s storage `nbytes` fresh, uninitialised bytes from its own allocator (no-op
// when it already holds at least that many).
void allocate_storage(const torch::Tensor& tensor, size_t nbytes);

// Whether `tensor`'s storage currently holds memory.
bool storage_is_allocated(const torch::Tensor& tensor);

// Bytes held by `tensor`'s storage (0 when released).
size_t storage_bytes(const torch::Tensor& tensor);

}  // namespace ooze::fsdp
