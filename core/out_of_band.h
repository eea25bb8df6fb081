// Archives that carry large byte ranges beside their stream, not inside it, derive from
// OutOfBandBytes. The actor wire format does (actors/wire_payload.h): a tensor argument's
// bytes then travel as a separate message part, handed to the transport and taken from it
// without a copy. core/tensor_serialization.h uses it for every tensor an archive accepts.
#pragma once

#include <cstdint>
#include <memory>

namespace ooze {

class OutOfBandBytes {
 public:
  virtual ~OutOfBandBytes() = default;
  // Saving: offers `nbytes` at `data`, kept alive by `owner` for as long as the archive needs
  // them. Returns false to have them written inline; otherwise sets `index`.
  virtual bool put(const void* data, uint64_t nbytes, std::shared_ptr<void> owner,
                   uint64_t* index) = 0;
  // Loading: the bytes put under `index` (sets `data`) and what keeps them alive. Throws
  // ooze::FormatError when there is no such range or it does not hold `nbytes` bytes.
  virtual std::shared_ptr<void> take(uint64_t index, uint64_t nbytes, void** data) = 0;
  // Loading: how many bytes the stream itself has left, so that a length read from it can be
  // checked before anything that size is allocated.
  virtual uint64_t stream_bytes_left() const = 0;
};

}  // namespace ooze
