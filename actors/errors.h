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
// a call may or may not have run. The message names the actor by label, id and pid (when
// known), so that a user can find its log and tell which of several like it died:
// "RolloutEngine (actor 2a53..., pid 2123) died: killed by signal 9 (SIGKILL)".
class ActorDiedError : public Error {
 public:
  ActorDiedError(std::string actor, std::string reason, std::string actor_id = "", int pid = 0)
      : Error(describe(actor, actor_id, pid) + " died: " + reason),
        actor_(std::move(actor)),
        reason_(std::move(reason)),
        actor_id_(std::move(actor_id)),
        pid_(pid) {}
  const std::string& actor() const { return actor_; }  // the label, e.g. "TrainActor rank=1"
  const std::string& reason() const { return reason_; }
  const std::string& actor_id() const { return actor_id_; }  // empty: unknown
  int pid() const { return pid_; }                           // 0: it never had a process

 private:
  static std::string describe(const std::string& actor, const std::string& actor_id, int pid) {
    if (actor_id.empty() && pid == 0) return actor;
    std::string known = actor_id.empty() ? "" : "actor " + actor_id;
    if (pid != 0) known += (known.empty() ? "" : ", ") + std::string("pid ") + std::to_string(pid);
    return actor + " (" + known + ")";
  }

  std::string actor_, reason_, actor_id_;
  int pid_ = 0;
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
