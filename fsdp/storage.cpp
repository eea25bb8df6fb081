#include "fsdp/storage.h"

#include <utility>

namespace ooze::fsdp {

void release_storage(const torch::Tensor& tensor) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->data() == nullptr) return;
  // Keep the device in the (empty) DataPtr: StorageImpl reports its device from it.
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, tensor.device()));
  storage->set_nbytes(static_cast<size_t>(0));
}

void allocate_storage(const torch::Tensor& tensor, size_t nbytes) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->data() != nullptr && storage->nbytes() >= nbytes) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

bool storage_is_allocated(const torch::Tensor& tensor) {
  return tensor.storage().unsafeGetStorageImpl()->data() != nullptr;
}

size_t storage_bytes(const torch::Tensor& tensor) {
  const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  return storage->data() == nullptr ? 0 : storage->nbytes();
}

}  // namespace ooze::fsdp
