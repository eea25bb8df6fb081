// Call arguments and results as payloads: the cereal stream plus out-of-band tensor bytes.
#pragma once

#include <cereal/types/tuple.hpp>
#include <string_view>

#include "actors/actor_class.h"

namespace ooze::actors {

template <class T>
Payload to_payload(const T& value) {
  Payload payload;
  {
    WireOutputArchive archive(payload.bytes, &payload.blobs);
    archive(value);
  }
  return payload;
}

template <class T>
T from_payload(Payload& payload) {
  T value{};
  try {
    WireInputArchive archive(std::string_view(payload.bytes), &payload.blobs);
    archive(value);
    archive.expect_end();
  } catch (const WireFormatError&) {
    throw;
  } catch (const std::exception& error) {
    throw WireFormatError(std::string("cannot decode ") + type_name(typeid(T)) + ": " +
                          error.what());
  }
  return value;
}

}  // namespace ooze::actors
