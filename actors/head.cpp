#include "actors/head.h"

#include <string>
#include <vector>

#include "actors/actor_table.h"
#include "actors/errors.h"
#include "actors/head_outbox.h"
#include "actors/kv_table.h"
#include "actors/node_table.h"
#include "actors/placement_group_table.h"
#include "actors/protocol.h"
#include "actors/wire.h"
#include "core/logging.h"

namespace ooze::actors {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// The loop: receives requests, hands each to the table it concerns, sweeps liveness and
// waiters, and carries out what spans tables (an owner's death takes its actors and placement
// groups along; freed resources let pending groups, then pending actors, run).
class Head::Loop {
 public:
  Loop(HeadOptions options, std::string* endpoint)
      : options_(std::move(options)),
        socket_(bind_socket(zmq::socket_type::router, options_.endpoint, options_.security,
                            kMaxControlPartBytes, endpoint)),
        outbox_(socket_),
        groups_(nodes_, outbox_),
        actors_(nodes_, groups_, outbox_, *endpoint),
        kv_(outbox_) {
    actors_.on_death([this](const ActorRecord& actor) {
      // Actors and placement groups this actor spawned go with it.
      release_owned_by(actor.spec.actor_id, "its owner actor " + actor.spec.label + " died");
      retry_pending();
    });
  }

  void run(const std::atomic<bool>& stopping) {
    auto last_check = Clock::now();
    while (!stopping.load()) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      for (int drained = 0; drained < 1000; ++drained) {
        std::string routing_id, rejected;
        auto message = receive_message(socket_, &routing_id, &rejected);
        if (!message) {
          if (rejected.empty()) break;
          OOZE_LOG(WARN) << "head dropped a malformed message: " << rejected;
          continue;
        }
        handle(routing_id, *message);
      }
      if (Clock::now() - last_check > std::chrono::milliseconds(100)) {
        last_check = Clock::now();
        check_liveness();
        expire_waiters();
      }
    }
  }

 private:
  void handle(const std::string& from, Message& message) {
    if (message.header.kind != MessageKind::kRequest) return;  // the head asks nobody anything
    const std::string& method = message.header.method;
    uint64_t id = message.header.id;
    const std::string done;  // the body of replies that only say "done"
    try {
      if (method == method::kHeartbeat) {
        nodes_.touch(from);
        outbox_.reply(from, id, done);
      } else if (method == method::kRegisterNode) {
        nodes_.register_node(from, decode<RegisterNode>(message));
        outbox_.reply(from, id, done);
        retry_pending();
      } else if (method == method::kRegisterClient) {
        nodes_.register_client(from, decode<RegisterClient>(message));
        outbox_.reply(from, id, done);
      } else if (method == method::kCreateActor) {
        actors_.create(from, id, decode<ActorSpec>(message));
      } else if (method == method::kGetActor) {
        actors_.get(from, id, decode<std::string>(message));
      } else if (method == method::kKillActor) {
        actors_.kill(from, id, decode<KillRequest>(message));
      } else if (method == method::kActorSpec) {
        actors_.spec(from, id, decode<std::string>(message));
      } else if (method == method::kWorkerStarted) {
        actors_.worker_started(decode<WorkerEvent>(message));
        outbox_.reply(from, id, done);
      } else if (method == method::kActorReady) {
        actors_.actor_ready(decode<WorkerEvent>(message));
        outbox_.reply(from, id, done);
      } else if (method == method::kActorFailed) {
        actors_.actor_failed(decode<WorkerEvent>(message));
        outbox_.reply(from, id, done);
      } else if (method == method::kWorkerExited) {
        actors_.worker_exited(decode<WorkerEvent>(message));
        outbox_.reply(from, id, done);
      } else if (method == method::kWorkerLog) {
        forward_log(decode<LogLines>(message));
        outbox_.reply(from, id, done);
      } else if (method == method::kCreatePlacementGroup) {
        outbox_.reply(from, id, groups_.create(from, decode<PlacementGroupSpec>(message)));
      } else if (method == method::kWaitPlacementGroup) {
        groups_.wait(from, id, decode<WaitRequest>(message));
      } else if (method == method::kRemovePlacementGroup) {
        remove_placement_group(decode<std::string>(message));
        outbox_.reply(from, id, done);
      } else if (method == method::kKvPut) {
        kv_.put(decode<KeyValue>(message));
        outbox_.reply(from, id, done);
      } else if (method == method::kKvGet) {
        kv_.get(from, id, decode<WaitRequest>(message));
      } else if (method == method::kKvAdd) {
        kv_.add(from, id, decode<KvAdd>(message));
      } else if (method == method::kKvWait) {
        kv_.wait(from, id, decode<KvWait>(message));
      } else if (method == method::kShutdown) {
        nodes_.remove_client(from);
        release_owned_by(from, "its driver shut down");
        outbox_.reply(from, id, done);
      } else if (method == method::kStatus) {
        outbox_.reply(from, id, status());
      } else {
        outbox_.reply_error(from, id, "UnknownMethod", "the head has no method \"" + method + "\"");
      }
    } catch (const WireFormatError& error) {
      outbox_.reply_error(from, id, "WireFormatError", "malformed " + method + ": " + error.what());
    } catch (const PlacementError& error) {
      outbox_.reply_error(from, id, "PlacementError", error.what());
    } catch (const std::exception& error) {
      outbox_.reply_error(from, id, "Error", error.what());
    }
  }

  template <class T>
  static T decode(const Message& message) {
    T value{};
    from_wire(message.body, value);
    return value;
  }

  // ---- what spans tables ------------------------------------------------------------------

  void check_liveness() {
    auto now = Clock::now();
    nodes_.expire_nodes(
        now, options_.node_timeout, [this](const std::string& node_id, const std::string& address) {
          actors_.node_died(node_id,
                            "its node " + node_id + " (" + address + ") stopped heart-beating");
        });
    for (const std::string& routing_id : nodes_.silent_clients(now, options_.client_timeout)) {
      nodes_.remove_client(routing_id);
      release_owned_by(routing_id, "its owner stopped heart-beating (exited or was killed)");
    }
  }

  void expire_waiters() {
    auto now = Clock::now();
    groups_.expire_waiters(now);
    kv_.expire_waiters(now);
  }

  // Actors and placement groups owned by a client (or an actor) that is gone go with it.
  void release_owned_by(const std::string& owner, const std::string& reason) {
    actors_.kill_owned_by(owner, reason);
    for (const std::string& group_id : groups_.owned_by(owner)) remove_placement_group(group_id);
  }

  // The group's actors die first, so that their shares of its bundles are back before the
  // group gives its reservations back to the nodes.
  void remove_placement_group(const std::string& group_id) {
    if (!groups_.contains(group_id)) return;
    actors_.kill_in_group(group_id);
    groups_.remove(group_id);
    retry_pending();
  }

  // Resources were freed or added: pending groups first (in table order), then actors.
  void retry_pending() {
    groups_.create_pending(
        [this](const std::string& group_id) { actors_.schedule_in_group(group_id); });
    actors_.schedule_pending();
  }

  void forward_log(const LogLines& lines) {
    // To the driver that owns the actor, or up the chain of owners to one.
    std::string owner = lines.owner_id;
    for (int hops = 0; hops < 16; ++hops) {
      if (nodes_.is_driver(owner)) {
        outbox_.event(owner, topic::kLog, lines);
        return;
      }
      const ActorRecord* actor = actors_.find(owner);
      if (actor == nullptr) return;
      owner = actor->spec.owner_id;
    }
  }

  ClusterStatus status() const {
    ClusterStatus status;
    status.nodes = nodes_.infos();
    status.actors = actors_.infos();
    status.placement_groups = groups_.infos();
    return status;
  }

  HeadOptions options_;
  zmq::socket_t socket_;
  HeadOutbox outbox_;
  NodeTable nodes_;
  PlacementGroupTable groups_;
  ActorTable actors_;
  KvTable kv_;
};

Head::Head(HeadOptions options) : loop_(std::make_unique<Loop>(std::move(options), &endpoint_)) {
  thread_ = std::thread([this] { loop_->run(stopping_); });
}

Head::~Head() { stop(); }

void Head::wait() {
  if (thread_.joinable()) thread_.join();
}

void Head::stop() {
  stopping_ = true;
  wait();
}

}  // namespace ooze::actors
