#pragma once

#include <string>
#include <vector>

#include "core/error.h"

namespace ooze {
namespace comm {

// A collective or rendezvous failed: a peer died, never arrived, or the call was invalid.
class CommError : public Error {
 public:
  using Error::Error;
};

// The specific case of a wait that ran past the group's timeout.
class CommTimeoutError : public CommError {
 public:
  using CommError::CommError;
};

}  // namespace comm
}  // namespace ooze
