// cereal save/load for at::Tensor, found by cereal through argument-dependent lookup (the
// archive's namespace is `cereal`). Works with the binary archives (BinaryOutputArchive /
// BinaryInputArchive, used by the actor wire format) and PortableBinary*Archive (not the JSON
// or XML text archives), so tensors can sit inside any cereal-serialized struct, vector or map:
//
//   cereal::BinaryOutputArchive out(stream);
//   out(tensor);                      // or out(std::vector<at::Tensor>{...})
//
// Wire form:
//   uint8  dtype code (0 = undefined tensor, nothing follows; see kTensorWireCodes in the .cpp)
//   uint32 rank, then rank x int64 sizes
//   uint64 byte count, then the raw bytes of the contiguous data (row-major)
//
// An archive deriving from ooze::OutOfBandBytes (core/out_of_band.h; the actor wire format)
// may take a tensor's bytes out of the stream: the dtype code then has kOutOfBandFlag set and a
// uint64 index replaces the bytes; the loaded tensor is a view of the bytes the archive holds.
//
// Saving makes non-contiguous tensors (transposes, strided slices) contiguous first and
// rejects tensors that are not dense CPU tensors (call .cpu() first); only the data travels,
// not strides, requires_grad or autograd history. Loading yields a new contiguous CPU tensor
// that owns its memory and throws ooze::FormatError on an unknown dtype code or on a byte
// count that does not match the shape.
#pragma once

#include <ATen/core/Tensor.h>

#include <cereal/cereal.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/out_of_band.h"

namespace ooze::detail {

// Checks that `tensor` can be saved; returns its contiguous CPU data and sets `code`.
at::Tensor prepare_tensor_for_save(const at::Tensor& tensor, uint8_t* code);
// Throws FormatError unless `code` names a dtype (0, the undefined tensor, is handled by load).
void check_tensor_wire_code(uint8_t code);
// Throws FormatError on a rank beyond LibTorch's limit, before any allocation.
void check_tensor_rank(uint32_t rank);
// Validates sizes against `nbytes` and allocates the tensor the bytes are read into.
at::Tensor allocate_loaded_tensor(uint8_t code, const std::vector<int64_t>& sizes, uint64_t nbytes);
// Validates like allocate_loaded_tensor and returns a tensor over `data`, which `owner` keeps.
at::Tensor tensor_over_bytes(uint8_t code, const std::vector<int64_t>& sizes, uint64_t nbytes,
                             void* data, std::shared_ptr<void> owner);

// Set on the dtype code of a tensor whose bytes went out of band (core/out_of_band.h): a
// uint64 index follows the byte count instead of the bytes.
constexpr uint8_t kOutOfBandFlag = 0x80;

// `T`, const when `Byte` is: the same bytes seen as elements of another width.
template <class Byte, class T>
using SameConstness = std::conditional_t<std::is_const_v<Byte>, const T, T>;

// Raw bytes as elements of their width, so PortableBinary archives swap byte order correctly.
// `Byte` is `const void` when saving and `void` when loading.
template <class Archive, class Byte>
void tensor_bytes(Archive& ar, Byte* data, uint64_t nbytes, int64_t element_size) {
  switch (element_size) {
    case 2:
      ar(cereal::binary_data(static_cast<SameConstness<Byte, uint16_t>*>(data), nbytes));
      break;
    case 4:
      ar(cereal::binary_data(static_cast<SameConstness<Byte, uint32_t>*>(data), nbytes));
      break;
    case 8:
      ar(cereal::binary_data(static_cast<SameConstness<Byte, uint64_t>*>(data), nbytes));
      break;
    default:
      ar(cereal::binary_data(static_cast<SameConstness<Byte, uint8_t>*>(data), nbytes));
  }
}

}  // namespace ooze::detail

namespace cereal {

template <class Archive>
void save(Archive& ar, const at::Tensor& tensor) {
  if (!tensor.defined()) {
    ar(uint8_t{0});
    return;
  }
  uint8_t code = 0;
  at::Tensor data = ooze::detail::prepare_tensor_for_save(tensor, &code);
  uint64_t nbytes = static_cast<uint64_t>(data.numel()) * data.element_size();
  uint64_t index = 0;
  bool out_of_band = false;
  if constexpr (std::is_base_of_v<ooze::OutOfBandBytes, Archive>) {
    out_of_band =
        nbytes > 0 && static_cast<ooze::OutOfBandBytes&>(ar).put(
                          data.data_ptr(), nbytes, std::make_shared<at::Tensor>(data), &index);
  }
  ar(static_cast<uint8_t>(out_of_band ? code | ooze::detail::kOutOfBandFlag : code),
     static_cast<uint32_t>(data.dim()));
  for (int64_t size : data.sizes()) ar(size);
  ar(nbytes);
  if (out_of_band) {
    ar(index);
  } else if (nbytes > 0) {
    ooze::detail::tensor_bytes(ar, static_cast<const void*>(data.data_ptr()), nbytes,
                               data.element_size());
  }
}

template <class Archive>
void load(Archive& ar, at::Tensor& tensor) {
  uint8_t code = 0;
  ar(code);
  if (code == 0) {
    tensor = at::Tensor();
    return;
  }
  // Only an archive that carries out-of-band bytes gives the flag a meaning; elsewhere such a
  // code is simply unknown.
  bool out_of_band = false;
  if constexpr (std::is_base_of_v<ooze::OutOfBandBytes, Archive>) {
    out_of_band = (code & ooze::detail::kOutOfBandFlag) != 0;
    code &= static_cast<uint8_t>(~ooze::detail::kOutOfBandFlag);
  }
  ooze::detail::check_tensor_wire_code(code);
  uint32_t rank = 0;
  ar(rank);
  ooze::detail::check_tensor_rank(rank);
  std::vector<int64_t> sizes(rank);
  for (int64_t& size : sizes) ar(size);
  uint64_t nbytes = 0;
  ar(nbytes);
  if (out_of_band) {
    if constexpr (std::is_base_of_v<ooze::OutOfBandBytes, Archive>) {
      uint64_t index = 0;
      ar(index);
      void* bytes = nullptr;
      std::shared_ptr<void> owner =
          static_cast<ooze::OutOfBandBytes&>(ar).take(index, nbytes, &bytes);
      tensor = ooze::detail::tensor_over_bytes(code, sizes, nbytes, bytes, std::move(owner));
      return;
    }
  }
  if constexpr (std::is_base_of_v<ooze::OutOfBandBytes, Archive>) {
    if (nbytes > static_cast<ooze::OutOfBandBytes&>(ar).stream_bytes_left()) {
      throw ooze::FormatError(
          "tensor in archive claims " + std::to_string(nbytes) + " bytes but the stream has only " +
          std::to_string(static_cast<ooze::OutOfBandBytes&>(ar).stream_bytes_left()) +
          " left; the archive is corrupt");
    }
  }
  at::Tensor loaded = ooze::detail::allocate_loaded_tensor(code, sizes, nbytes);
  if (nbytes > 0) {
    ooze::detail::tensor_bytes(ar, loaded.data_ptr(), nbytes, loaded.element_size());
  }
  tensor = std::move(loaded);
}

}  // namespace cereal
