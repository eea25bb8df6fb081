// Errors of the actor runtime, with Ray's meaning.
#pragma once

#include <string>

#include "core/error.h"

namespace ooze::actors {

// A method raised an exception in its actor. The actor keeps serving.
class RemoteError : public Error {
 public:
  RemoteError(std::string actor, std::string type, std::string message)
      : Error(actor + " raised " + type + ": " + message),
        actor_(std::move(actor)),
        type_(std::move(type)),
        remote_message_(std::move(message)) {}
  const std::string& actor() const { return actor_; }
  const std::string& type() const { return type_; }  // the exception's type name
  const std::string& remote_message() const { return remote_message_; }

 private:
  std::string actor_, type_, remote_message_;
};

// The actor's process is gone (exit, crash, kill, node death) or its constructor failed. A
// call that was pending when it died, or made after, fails with this; at-most-once means such
// a call may or may not have run.
class ActorDiedError : public Error {
 public:
  ActorDiedError(std::string actor, std::string reason)
      : Error(actor + " died: " + reason), actor_(std::move(actor)), reason_(std::move(reason)) {}
  const std::string& actor() const { return actor_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string actor_, reason_;
};

// Future::get(timeout) or a wait ran out of time; the call itself goes on.
class GetTimeoutError : public Error {
 public:
  using Error::Error;
};

// A request the cluster can never satisfy (resources no node has), or a placement group that
// was removed.
class PlacementError : public Error {
 public:
  using Error::Error;
};

// The runtime itself failed: no head at the address, refused credentials, a lost connection.
class RuntimeError : public Error {
 public:
  using Error::Error;
};

}  // namespace ooze::actors
