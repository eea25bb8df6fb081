// N ranked actors of one class, addressed together: the shape of a trainer (W FSDP ranks) or
// a set of rollout engines.
//
//   PlacementGroup group = PlacementGroup::create(bundles, "PACK");
//   group.ready();
//   auto trainers = ActorGroup<TrainActor>::spawn(4, {.placement_group = &group}, config);
//   get_all(trainers.call_all(&TrainActor::init));
//   auto losses = get_all(trainers.call_each(&TrainActor::train_step,
//                                            [&](int rank) { return std::make_tuple(batches[rank]);
//                                            }));
//
// Rank r runs in bundle r of the placement group in its reported order (node address, GPU
// id), so ranks on one node are contiguous and line up with GPU ids. Each worker gets RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and OOZE_GROUP (the group's name) in its environment,
// and its log prefix is "(Class rank=r pid=...)".
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "actors/placement_group.h"
#include "actors/runtime.h"

namespace ooze::actors {

struct ActorGroupOptions {
  ActorOptions actor;  // per actor; name gets "-<rank>" appended when set
  const PlacementGroup* placement_group = nullptr;  // ready; one bundle per rank
  std::string group_name;                           // OOZE_GROUP, and the key prefix for rendezvous
};

namespace detail {
// Per-rank actor options (bundle, rank variables, label) for a group of `size` of `class_name`.
std::vector<ActorOptions> group_member_options(const std::string& class_name, int size,
                                               const ActorGroupOptions& options);
}  // namespace detail

template <class T>
class ActorGroup {
 public:
  template <class... Args>
  static ActorGroup spawn(int size, const ActorGroupOptions& options, const Args&... args) {
    const std::string& class_name = ActorRegistry::instance().by_type(typeid(T)).name;
    ActorGroup group;
    for (const ActorOptions& member : detail::group_member_options(class_name, size, options)) {
      group.actors_.push_back(actors::spawn<T>(member, args...));
    }
    return group;
  }

  int size() const { return static_cast<int>(actors_.size()); }
  const ActorHandle<T>& operator[](int rank) const { return actors_.at(rank); }
  const std::vector<ActorHandle<T>>& actors() const { return actors_; }

  void wait_ready(std::chrono::milliseconds timeout = std::chrono::seconds(60)) const {
    for (const auto& actor : actors_) actor.wait_ready(timeout);
  }

  // The same call on every rank.
  template <class Method, class... Args>
  auto call_all(Method method, const Args&... args) const {
    using F = decltype(actors_.front().call(method, args...));
    std::vector<F> futures;
    for (const auto& actor : actors_) futures.push_back(actor.call(method, args...));
    return futures;
  }

  // Per-rank arguments: `arguments_of(rank)` returns a std::tuple of rank's arguments.
  template <class Method, class ArgumentsOf>
  auto call_each(Method method, ArgumentsOf&& arguments_of) const {
    auto call_rank = [&](int rank) {
      return std::apply([&](auto&&... a) { return actors_.at(rank).call(method, a...); },
                        arguments_of(rank));
    };
    std::vector<decltype(call_rank(0))> futures;
    for (int rank = 0; rank < size(); ++rank) futures.push_back(call_rank(rank));
    return futures;
  }

  // One rank.
  template <class Method, class... Args>
  auto call(int rank, Method method, Args&&... args) const {
    return actors_.at(rank).call(method, std::forward<Args>(args)...);
  }

 private:
  std::vector<ActorHandle<T>> actors_;
};

}  // namespace ooze::actors
