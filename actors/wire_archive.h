// The cereal archives of the wire format (with cereal's support for strings, vectors, maps,
// pairs, tuples and std::chrono durations included): binary, little-endian as the machine is
// (every node of a cluster is x86-64 or aarch64), and bounded when reading.
//
// Large byte ranges (tensor data, see core/out_of_band.h) go beside the stream when the archive
// is given a list of blobs: each becomes one message part, handed to ZeroMQ without a copy on
// the way out and turned into a tensor over the received part on the way in.
//
// Bytes arrive from the network, so a length prefix cannot be trusted: cereal's own binary
// archive would resize a string or vector to whatever a corrupt prefix says. WireInputArchive
// refuses any container length larger than the bytes left in the frame, which bounds every
// allocation by the size of the frame that was actually received.
#pragma once

#include <cereal/cereal.hpp>
#include <cereal/types/chrono.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "actors/errors.h"
#include "actors/shared_memory.h"
#include "core/out_of_band.h"

namespace ooze::actors {

// A frame that does not decode: truncated, oversized lengths, trailing bytes.
class WireFormatError : public FormatError {
 public:
  using FormatError::FormatError;
};

// Byte ranges at least this large travel out of band when an archive has a blob list.
constexpr uint64_t kOutOfBandMinBytes = 16 * 1024;
// An out-of-band index with this bit set refers to a shared memory descriptor
// (shared_memory.h) instead of the bytes themselves.
constexpr uint64_t kSharedBlobBit = uint64_t{1} << 63;

class WireOutputArchive
    : public cereal::OutputArchive<WireOutputArchive, cereal::AllowEmptyClassElision>,
      public OutOfBandBytes {
 public:
  explicit WireOutputArchive(std::string& out, std::vector<zmq::message_t>* blobs = nullptr)
      : cereal::OutputArchive<WireOutputArchive, cereal::AllowEmptyClassElision>(this),
        out_(out),
        blobs_(blobs) {}
  void saveBinary(const void* data, std::size_t size) {
    out_.append(static_cast<const char*>(data), size);
  }
  bool put(const void* data, uint64_t nbytes, std::shared_ptr<void> owner,
           uint64_t* index) override {
    if (blobs_ == nullptr || nbytes < kOutOfBandMinBytes) return false;
    *index = blobs_->size();
    if (nbytes >= kSharedMemoryMinBytes && shared_memory_enabled()) {
      blobs_->push_back(write_shared_segment(data, nbytes));
      *index |= kSharedBlobBit;
      return true;
    }
    auto* keep = new std::shared_ptr<void>(std::move(owner));
    blobs_->emplace_back(
        const_cast<void*>(data), nbytes,
        [](void*, void* hint) { delete static_cast<std::shared_ptr<void>*>(hint); }, keep);
    return true;
  }
  std::shared_ptr<void> take(uint64_t, uint64_t, void**) override {
    throw WireFormatError("an output archive has nothing to take");
  }
  uint64_t stream_bytes_left() const override { return 0; }

 private:
  std::string& out_;
  std::vector<zmq::message_t>* blobs_;
};

class WireInputArchive
    : public cereal::InputArchive<WireInputArchive, cereal::AllowEmptyClassElision>,
      public OutOfBandBytes {
 public:
  explicit WireInputArchive(std::string_view in, std::vector<zmq::message_t>* blobs = nullptr)
      : cereal::InputArchive<WireInputArchive, cereal::AllowEmptyClassElision>(this),
        in_(in),
        blobs_(blobs) {}
  bool put(const void*, uint64_t, std::shared_ptr<void>, uint64_t*) override { return false; }
  // Each blob can be taken once: the tensor made over it owns it from then on.
  std::shared_ptr<void> take(uint64_t index, uint64_t nbytes, void** data) override {
    if ((index & kSharedBlobBit) != 0) {
      index &= ~kSharedBlobBit;
      if (blobs_ == nullptr || index >= blobs_->size()) {
        throw WireFormatError("tensor refers to missing shared memory blob " +
                              std::to_string(index));
      }
      return map_shared_segment((*blobs_)[index], nbytes, data);
    }
    if (blobs_ == nullptr || index >= blobs_->size() || (*blobs_)[index].size() != nbytes) {
      throw WireFormatError("tensor refers to blob " + std::to_string(index) + " of " +
                            std::to_string(nbytes) + " bytes, which the message does not have");
    }
    auto owner = std::make_shared<zmq::message_t>(std::move((*blobs_)[index]));
    (*blobs_)[index].rebuild(std::size_t{0});  // an emptied part: a second take fails above
    *data = owner->data();
    return owner;
  }
  void loadBinary(void* data, std::size_t size) {
    if (size > in_.size() - position_) {
      throw WireFormatError("frame truncated: needed " + std::to_string(size) + " bytes, " +
                            std::to_string(in_.size() - position_) + " left");
    }
    std::memcpy(data, in_.data() + position_, size);
    position_ += size;
  }
  std::size_t remaining() const { return in_.size() - position_; }
  uint64_t stream_bytes_left() const override { return remaining(); }
  // Throws unless every byte was consumed (a frame with trailing garbage is malformed).
  void expect_end() const {
    if (position_ != in_.size()) {
      throw WireFormatError(std::to_string(remaining()) + " unexpected trailing bytes in frame");
    }
  }

 private:
  std::string_view in_;
  std::size_t position_ = 0;
  std::vector<zmq::message_t>* blobs_;
};

// Serializes `values...` into a new byte string.
template <class... T>
std::string to_wire(const T&... values) {
  std::string out;
  {
    WireOutputArchive archive(out);
    archive(values...);
  }
  return out;
}

// Deserializes exactly `values...` from `bytes`; throws WireFormatError on anything else
// (cereal's own exceptions are translated).
template <class... T>
void from_wire(std::string_view bytes, T&... values) {
  try {
    WireInputArchive archive(bytes);
    archive(values...);
    archive.expect_end();
  } catch (const WireFormatError&) {
    throw;
  } catch (const ooze::Error& error) {
    throw WireFormatError(error.what());
  } catch (const std::exception& error) {
    throw WireFormatError(std::string("malformed frame: ") + error.what());
  }
}

}  // namespace ooze::actors

namespace cereal {

template <class T>
std::enable_if_t<std::is_arithmetic<T>::value> CEREAL_SAVE_FUNCTION_NAME(
    ooze::actors::WireOutputArchive& ar, const T& value) {
  ar.saveBinary(std::addressof(value), sizeof(value));
}
template <class T>
std::enable_if_t<std::is_arithmetic<T>::value> CEREAL_LOAD_FUNCTION_NAME(
    ooze::actors::WireInputArchive& ar, T& value) {
  ar.loadBinary(std::addressof(value), sizeof(value));
}
template <class Archive, class T>
CEREAL_ARCHIVE_RESTRICT(ooze::actors::WireInputArchive, ooze::actors::WireOutputArchive)
CEREAL_SERIALIZE_FUNCTION_NAME(Archive& ar, NameValuePair<T>& pair) {
  ar(pair.value);
}
template <class T>
void CEREAL_SAVE_FUNCTION_NAME(ooze::actors::WireOutputArchive& ar, const SizeTag<T>& tag) {
  uint64_t size = static_cast<uint64_t>(tag.size);
  ar.saveBinary(&size, sizeof(size));
}
// Every element of a container takes at least one byte on the wire, so a length above the
// bytes left is a lie (this bounds the allocation cereal makes next).
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(ooze::actors::WireInputArchive& ar, SizeTag<T>& tag) {
  uint64_t size = 0;
  ar.loadBinary(&size, sizeof(size));
  if (size > ar.remaining()) {
    throw ooze::actors::WireFormatError("length prefix " + std::to_string(size) + " exceeds the " +
                                        std::to_string(ar.remaining()) + " bytes left in frame");
  }
  tag.size = static_cast<std::remove_reference_t<T>>(size);
}
template <class T>
void CEREAL_SAVE_FUNCTION_NAME(ooze::actors::WireOutputArchive& ar, const BinaryData<T>& data) {
  ar.saveBinary(data.data, static_cast<std::size_t>(data.size));
}
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(ooze::actors::WireInputArchive& ar, BinaryData<T>& data) {
  ar.loadBinary(data.data, static_cast<std::size_t>(data.size));
}

}  // namespace cereal

CEREAL_REGISTER_ARCHIVE(ooze::actors::WireOutputArchive)
CEREAL_REGISTER_ARCHIVE(ooze::actors::WireInputArchive)
CEREAL_SETUP_ARCHIVE_TRAITS(ooze::actors::WireInputArchive, ooze::actors::WireOutputArchive)
