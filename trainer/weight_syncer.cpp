#include "trainer/weight_syncer.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <sstream>

#include "actors/kv_store.h"
#include "comm/process_group.h"
#include "core/checksum.h"
#include "core/logging.h"
#include "core/timer.h"
#include "fsdp/fully_shard.h"

namespace ooze::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// The per-entry CRC-32s of a packed bucket (what every engine's parameters must hash to).
void add_checksums(const weight_sync::BucketManifest& manifest, const at::Tensor& buffer,
                   std::map<std::string, uint32_t>& sums) {
  const at::Tensor bytes = buffer.narrow(0, 0, manifest.nbytes).to(at::kCPU).contiguous();
  const auto* data = bytes.data_ptr<uint8_t>();
  for (const weight_sync::BucketEntry& entry : manifest.entries) {
    sums[entry.name] = crc32(data + entry.offset, static_cast<size_t>(entry.nbytes));
  }
}

}  // namespace

// One engine of a sync. The first failure sticks: the engine gets nothing more in this sync.
struct WeightSyncer::Target {
  size_t index = 0;
  const EngineHandle* engine = nullptr;
  std::string failure;

  bool ok() const { return failure.empty(); }
  std::string name() const {
    return "engine " + std::to_string(index) + " (" + engine->label() + ", actor " + engine->id() +
           ")";
  }
};

namespace {

// Waits for an engine's answer within the sync's timeout; a failure is recorded on the target
// (naming `what`) instead of thrown, so the rank's other engines go on.
template <class R>
bool await(actors::Future<R>& future, const std::string& what, std::chrono::milliseconds timeout,
           std::string& failure, R* value = nullptr) {
  try {
    if constexpr (std::is_void_v<R>) {
      future.get(timeout);
    } else {
      R result = future.get(timeout);
      if (value != nullptr) *value = std::move(result);
    }
    return true;
  } catch (const actors::GetTimeoutError&) {
    failure = what + ": no answer within " + std::to_string(timeout.count() / 1000.0) +
              " s (--weight-sync-timeout)";
  } catch (const std::exception& e) {
    failure = what + ": " + e.what();
  }
  return false;
}

}  // namespace

template <class Method, class... Args>
void WeightSyncer::call_targets(std::vector<Target>& targets, const std::string& what,
                                Method method, const Args&... args) {
  using Answer = decltype(targets.front().engine->call(method, args...));
  std::vector<std::optional<Answer>> answers(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].ok()) answers[i] = targets[i].engine->call(method, args...);
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (answers[i]) await(*answers[i], what, options_.timeout(), targets[i].failure);
  }
}

WeightSyncer::WeightSyncer(fsdp::FullyShardedModule& model, SyncedWeights weights,
                           at::ScalarType engine_dtype, std::vector<EngineHandle> engines,
                           EnginePlacement placement, WeightSyncOptions options, std::string name)
    : model_(model),
      engines_(std::move(engines)),
      placement_(placement),
      options_(options),
      name_(std::move(name)),
      all_(model, std::move(weights.all), engine_dtype, options.update_weight_buffer_size),
      rank_(model.rank()),
      world_size_(model.world_size()),
      engine_mapped_(engines_.size(), false) {
  if (!weights.changed.empty()) {
    changed_.emplace(model, std::move(weights.changed), engine_dtype,
                     options.update_weight_buffer_size);
  }
  for (const EngineHandle& engine : engines_) engine_restarts_.push_back(engine.info().restarts);
  if (engines_.empty()) throw ConfigError("WeightSyncer: no rollout engine to sync");
  cleanup_stale_segments();  // left by trainers that died mid-sync
}

WeightSyncer::WeightSyncer(fsdp::FullyShardedModule& model, at::ScalarType engine_dtype,
                           std::vector<EngineHandle> engines, EnginePlacement placement,
                           WeightSyncOptions options, std::string name)
    : WeightSyncer(model, SyncedWeights{sharded_parameters(model), {}}, engine_dtype,
                   std::move(engines), placement, options, std::move(name)) {}

WeightSyncer::~WeightSyncer() = default;

std::vector<size_t> WeightSyncer::served_engines() const {
  std::vector<size_t> served;
  for (size_t i = 0; i < engines_.size(); ++i) {
    if (placement_ == EnginePlacement::kColocated
            ? static_cast<int>(i % static_cast<size_t>(world_size_)) == rank_
            : rank_ == 0) {
      served.push_back(i);
    }
  }
  return served;
}

WeightSyncReport WeightSyncer::sync(int64_t version, bool abort_in_flight) {
  std::vector<size_t> all(engines_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return run(version, abort_in_flight, all);
}

WeightSyncReport WeightSyncer::sync_engine(size_t index, int64_t version) {
  if (index >= engines_.size()) {
    throw ConfigError("sync_engine: there is no engine " + std::to_string(index) + " (" +
                      std::to_string(engines_.size()) + " engines)");
  }
  engine_mapped_[index] = false;  // a restarted engine has mapped nothing
  leave_group_of(index);          // nor joined any group
  send_all_next_ = true;          // and its weights may be anything
  return run(version, /*abort_in_flight=*/true, {index});
}

int64_t WeightSyncer::largest_bucket_bytes() const {
  return std::max(all_.largest_bucket_bytes(), changed_ ? changed_->largest_bucket_bytes() : 0);
}

bool WeightSyncer::agree_on_partial() {
  if (!changed_) return false;
  const std::shared_ptr<comm::Communicator>& comm = model_.communicator();
  if (!comm || comm->size() == 1) return !send_all_next_;
  at::Tensor send_all =
      at::full({1}, send_all_next_ ? 1.0f : 0.0f,
               at::TensorOptions().device(model_.unit(0).master_shard().device()));
  comm->all_reduce(send_all, comm::ReduceOp::MAX);
  return send_all.item<float>() == 0.0f;
}

WeightSyncReport WeightSyncer::run(int64_t version, bool abort_in_flight,
                                   const std::vector<size_t>& indices) {
  const Clock::time_point start = Clock::now();
  std::vector<Target> targets;
  const std::vector<size_t> served = served_engines();
  for (size_t index : indices) {
    if (std::find(served.begin(), served.end(), index) == served.end()) continue;
    // An engine the runtime restarted since the last sync (it died between two) is a new
    // process: it has mapped no buffer, joined no group, and holds its initial weights.
    const int32_t restarts = engines_[index].info().restarts;
    if (restarts != engine_restarts_[index]) {
      engine_mapped_[index] = false;
      leave_group_of(index);
      engine_restarts_[index] = restarts;
      send_all_next_ = true;
    }
    targets.push_back(Target{index, &engines_[index], ""});
  }
  const bool partial = agree_on_partial();
  buckets_ = partial ? &*changed_ : &all_;
  send_all_next_ = true;  // until this sync is known to have reached every engine
  WeightSyncReport report;
  report.version = version;
  report.buckets = static_cast<int64_t>(buckets_->plan().size());
  report.bytes = buckets_->total_bytes();
  trainer_checksums_.clear();
  if (targets.empty()) {
    // The other ranks' in-place writes or gathers need this rank's shards.
    if (placement_ != EnginePlacement::kColocated || !deliver_in_place(targets, indices, report)) {
      walk_without_delivering(report);
    }
    report.seconds = seconds_since(start);
    send_all_next_ = false;
    return report;
  }

  Clock::time_point control = Clock::now();
  const auto timeout = options_.timeout();
  call_targets(targets, "begin_weight_sync(" + std::to_string(version) + ")",
               &serving::RolloutEngine::begin_weight_sync, version, abort_in_flight, timeout,
               partial);
  report.control_seconds += seconds_since(control);

  if (placement_ == EnginePlacement::kColocated) {
    if (!deliver_in_place(targets, indices, report)) deliver_colocated(targets, report);
  } else {
    deliver_broadcast(targets, report);
  }

  control = Clock::now();
  call_targets(targets, "finish_weight_sync", &serving::RolloutEngine::finish_weight_sync, version);
  if (options_.check) check_checksums(targets);
  report.control_seconds += seconds_since(control);

  std::ostringstream failures;
  int64_t delivered = 0;
  for (Target& t : targets) {
    if (t.ok()) {
      ++delivered;
      continue;
    }
    failures << "\n  " << t.name() << ": " << t.failure;
    engine_mapped_[t.index] = false;  // restarted, it maps the buffers anew
    leave_group_of(t.index);          // and joins a new group
    // Best effort: an engine still alive must not wait out its own timeout to refuse requests.
    try {
      t.engine->call(&serving::RolloutEngine::abort_weight_sync, t.failure).get(timeout);
    } catch (const std::exception&) {
    }
  }
  report.engines = delivered;
  report.seconds = seconds_since(start);
  send_all_next_ = !failures.str().empty();
  if (!failures.str().empty()) {
    throw WeightSyncError("weight sync to version " + std::to_string(version) +
                          " from trainer rank " + std::to_string(rank_) + " failed for " +
                          std::to_string(targets.size() - static_cast<size_t>(delivered)) + " of " +
                          std::to_string(targets.size()) +
                          " engines (the others have it):" + failures.str());
  }
  return report;
}

void WeightSyncer::leave_group_of(size_t index) {
  if (std::find(group_members_.begin(), group_members_.end(), index) == group_members_.end()) {
    return;
  }
  group_.reset();
  group_members_.clear();
}

void WeightSyncer::walk_without_delivering(WeightSyncReport& report) {
  if (agree_on_writing_into_root(false, report)) {
    write_into_root(report);
    return;
  }
  const Clock::time_point start = Clock::now();
  for (size_t k = 0; k < buckets_->plan().size(); ++k) buckets_->pack(k, nullptr);
  report.pack_seconds += seconds_since(start);
}

void WeightSyncer::open_shared_buffers(std::vector<Target>& targets) {
  bool all_mapped = !shared_.empty();
  for (const Target& t : targets) all_mapped = all_mapped && engine_mapped_[t.index];
  if (all_mapped) return;
  // New buffers for everyone this rank serves: the old names are gone from /dev/shm.
  shared_.clear();
  shared_segments_.clear();
  cuda_buffers_.clear();
  std::fill(engine_mapped_.begin(), engine_mapped_.end(), false);
  const at::Device device = model_.unit(0).master_shard().device();
  weight_sync::SharedWeightBuffers buffers;
  buffers.cuda_ipc = device.is_cuda();
  buffers.nbytes = largest_bucket_bytes();
  for (int i = 0; i < 2; ++i) {
    if (buffers.cuda_ipc) {
      cuda_buffers_.push_back(weight_sync::CudaIpcBuffer::create(buffers.nbytes, device.index()));
      buffers.handles.push_back(cuda_buffers_.back().handle());
      shared_.push_back(cuda_buffers_.back().as_tensor());
    } else {
      shared_segments_.push_back(SharedMemorySegment::create(buffers.nbytes));
      buffers.handles.push_back(shared_segments_.back().name());
      shared_.push_back(shared_segments_.back().as_tensor());
    }
  }
  call_targets(targets, "mapping the shared weight buffers",
               &serving::RolloutEngine::open_shared_weight_buffers, buffers);
  for (const Target& t : targets) engine_mapped_[t.index] = t.ok();
  for (SharedMemorySegment& segment : shared_segments_) segment.unlink();  // the mappings stay
}

void WeightSyncer::pack(size_t k, at::Tensor& buffer, WeightSyncReport& report) {
  const Clock::time_point start = Clock::now();
  buckets_->pack(k, &buffer);
  if (options_.check) add_checksums(buckets_->plan()[k], buffer, trainer_checksums_);
  report.pack_seconds += seconds_since(start);
}

void WeightSyncer::deliver_colocated(std::vector<Target>& targets, WeightSyncReport& report) {
  const Clock::time_point control = Clock::now();
  open_shared_buffers(targets);
  report.control_seconds += seconds_since(control);
  const std::vector<weight_sync::BucketManifest>& plan = buckets_->plan();

  // Each engine's load of the bucket before, in flight while the next is packed into the other
  // buffer.
  std::vector<std::optional<actors::Future<void>>> loading(targets.size());
  auto wait_loads = [&](size_t bucket) {
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < targets.size(); ++i) {
      if (!loading[i]) continue;
      await(*loading[i],
            "loading bucket " + std::to_string(bucket) + " of " + std::to_string(plan.size()),
            options_.timeout(), targets[i].failure);
      loading[i].reset();
    }
    report.transfer_seconds += seconds_since(start);
  };
  for (size_t k = 0; k < plan.size(); ++k) {
    at::Tensor buffer = shared_[k % 2];
    pack(k, buffer, report);
    // CUDA orders nothing across processes: the bucket is complete before an engine reads it.
    if (buffer.is_cuda()) torch::cuda::synchronize(buffer.device().index());
    if (k > 0) wait_loads(k - 1);  // frees the other buffer for bucket k+1
    for (size_t i = 0; i < targets.size(); ++i) {
      if (!targets[i].ok()) continue;
      loading[i] = targets[i].engine->call(&serving::RolloutEngine::load_shared_weight_bucket,
                                           static_cast<int>(k % 2), plan[k]);
    }
  }
  if (!plan.empty()) wait_loads(plan.size() - 1);
}

std::string WeightSyncer::map_engine_parameters(size_t index, int64_t version) {
  const weight_sync::SharedParameters shared =
      engines_[index].call(&serving::RolloutEngine::share_parameters).get(options_.timeout());
  const std::string host = actors::node_address();
  if (shared.segment.empty()) throw Error("it keeps its weights on a GPU");
  if (shared.host != host) throw Error("it runs on " + shared.host + ", this rank on " + host);
  // Only an engine in this very sync may be written: one restarted since its begin_weight_sync
  // is serving what it loaded.
  if (shared.syncing_version != version) {
    return "it is not in the sync to version " + std::to_string(version) +
           " (restarted since it began?)";
  }
  std::unique_ptr<SharedParameterWriter>& writer = parameter_writers_[index];
  if (!writer || writer->segment() != shared.segment) {
    writer.reset();  // the old mapping goes first
    writer = std::make_unique<SharedParameterWriter>(model_, all_.tensors(), shared);
  }
  return "";
}

bool WeightSyncer::deliver_in_place(std::vector<Target>& targets,
                                    const std::vector<size_t>& indices, WeightSyncReport& report) {
  // What every rank decides alike, without asking the others: merged (LoRA) tensors and GPU
  // memory go by buckets.
  if (buckets_ != &all_ || !writable_in_place(all_.tensors()) ||
      !model_.unit(0).master_shard().device().is_cpu()) {
    return false;
  }
  Clock::time_point control = Clock::now();
  const std::shared_ptr<comm::Communicator>& comm = model_.communicator();
  const bool collective = comm && comm->size() > 1;
  auto agree = [&](at::Tensor& flags) {
    if (collective) comm->all_reduce(flags, comm::ReduceOp::MAX);
  };
  // Per engine: 1 when it must not be written (it did not begin the sync on the rank that serves
  // it, or some rank cannot reach it in this sync). First, the begins, and a barrier: no rank
  // asks an engine whether it is syncing before the one serving it has begun.
  const int64_t engines = static_cast<int64_t>(engines_.size());
  at::Tensor skip = at::zeros({engines}, at::kFloat);
  for (const Target& t : targets) skip[static_cast<int64_t>(t.index)] = t.ok() ? 0.0f : 1.0f;
  agree(skip);
  // Then every rank maps every engine of the sync; the last flag: some rank cannot write in
  // place at all (the weights then go by buckets, on every rank).
  at::Tensor cannot = at::zeros({engines + 1}, at::kFloat);
  std::map<size_t, std::string> why_not;  // this rank's reasons, by engine
  std::string cannot_at_all;
  for (size_t index : indices) {
    if (skip[static_cast<int64_t>(index)].item<float>() != 0.0f) continue;
    try {
      why_not[index] = map_engine_parameters(index, report.version);
      if (!why_not[index].empty()) cannot[static_cast<int64_t>(index)] = 1.0f;
    } catch (const std::exception& e) {
      cannot_at_all = "engine " + std::to_string(index) + ": " + e.what();
      cannot[engines] = 1.0f;
    }
  }
  agree(cannot);
  report.control_seconds += seconds_since(control);
  if (cannot[engines].item<float>() != 0.0f) {
    if (!cannot_at_all.empty() && !warned_not_in_place_) {
      OOZE_LOG(INFO) << "weight sync: rank " << rank_ << " cannot write the engines' parameters "
                     << "in place (" << cannot_at_all << "); the weights go by buckets";
      warned_not_in_place_ = true;
    }
    return false;
  }
  skip = at::maximum(skip, cannot.narrow(0, 0, engines));

  const Clock::time_point start = Clock::now();
  const bool check = options_.check;
  // This rank's slices' CRC-32s and bytes, with --check-weight-sync (all 0 if it wrote none).
  std::vector<std::pair<uint32_t, int64_t>> sums(all_.tensors().size());
  bool summed = false;
  for (size_t index : indices) {
    if (skip[static_cast<int64_t>(index)].item<float>() != 0.0f) continue;
    try {
      // Every engine gets the same bytes: they are summed at the first.
      parameter_writers_.at(index)->write(check && !summed ? &sums : nullptr);
      summed = summed || check;
    } catch (const std::exception& e) {
      skip[static_cast<int64_t>(index)] = 1.0f;
      why_not[index] = std::string("writing its parameters failed: ") + e.what();
    }
  }
  report.pack_seconds += seconds_since(start);

  control = Clock::now();
  // The barrier before any engine hears it is written: every rank has written its shards.
  agree(skip);
  if (check) combine_slice_checksums(sums);
  for (Target& t : targets) {
    if (!t.ok() || skip[static_cast<int64_t>(t.index)].item<float>() == 0.0f) continue;
    const std::string& reason = why_not[t.index];
    t.failure = reason.empty() ? "another trainer rank could not write its parameters in place "
                                 "(see that rank's log)"
                               : reason;
  }
  call_targets(targets, "marking the parameters written",
               &serving::RolloutEngine::shared_parameters_written);
  report.control_seconds += seconds_since(control);
  report.buckets = 0;
  report.slices_written = true;
  return true;
}

void WeightSyncer::combine_slice_checksums(
    const std::vector<std::pair<uint32_t, int64_t>>& slices) {
  // Each tensor's slices lie in rank order (rank r's shard follows rank r-1's), so the ranks'
  // CRCs of them combine into the tensor's.
  const std::vector<SyncedTensor>& tensors = all_.tensors();
  const int64_t count = static_cast<int64_t>(tensors.size());
  at::Tensor mine = at::empty({count, 2}, at::kLong);
  for (int64_t i = 0; i < count; ++i) {
    mine[i][0] = static_cast<int64_t>(slices[static_cast<size_t>(i)].first);
    mine[i][1] = slices[static_cast<size_t>(i)].second;
  }
  at::Tensor all = mine.unsqueeze(0);
  const std::shared_ptr<comm::Communicator>& comm = model_.communicator();
  if (comm && comm->size() > 1) {
    all = at::empty({world_size_, count, 2}, at::kLong);
    comm->all_gather(all, mine);
  }
  trainer_checksums_.clear();
  for (int64_t i = 0; i < count; ++i) {
    uint32_t crc = 0;
    for (int64_t r = 0; r < world_size_; ++r) {
      crc = crc32_combine(crc, static_cast<uint32_t>(all[r][i][0].item<int64_t>()),
                          static_cast<uint64_t>(all[r][i][1].item<int64_t>()));
    }
    trainer_checksums_[tensors[static_cast<size_t>(i)].name] = crc;
  }
}

void WeightSyncer::form_group(std::vector<Target>& targets) {
  std::vector<size_t> members;
  for (const Target& t : targets) members.push_back(t.index);
  if (group_ && members == group_members_) return;
  group_.reset();
  group_members_.clear();
  // Keys of an earlier group stay in the head's store: every group this process forms gets a
  // name of its own, whichever syncer forms it.
  static std::atomic<int64_t> groups_formed{0};
  const std::string name =
      name_ + "/weight-sync-" + std::to_string(::getpid()) + "-" + std::to_string(++groups_formed);
  comm::ProcessGroupOptions options;
  options.timeout_minutes = options_.timeout_seconds / 60;
  options.host = actors::node_address();
  const int world_size = static_cast<int>(targets.size()) + 1;
  std::vector<actors::Future<void>> joined;
  for (size_t j = 0; j < targets.size(); ++j) {
    weight_sync::BroadcastGroupSpec spec{name, static_cast<int>(j) + 1, world_size, options};
    joined.push_back(
        targets[j].engine->call(&serving::RolloutEngine::join_weight_sync_group, spec));
  }
  std::string failure;
  try {
    group_ = comm::init_process_group(
        std::make_shared<comm::PrefixStore>(name, std::make_shared<actors::KvStore>()), 0,
        world_size, name, model_.unit(0).master_shard().device(), options);
  } catch (const std::exception& e) {
    failure = std::string("the broadcast group '") + name + "' did not form: " + e.what();
  }
  for (size_t j = 0; j < targets.size(); ++j) {
    await(joined[j], "joining the broadcast group '" + name + "'", options_.timeout(),
          targets[j].failure);
  }
  for (Target& t : targets) {
    if (!failure.empty() && t.ok()) t.failure = failure;
    if (!t.ok()) group_.reset();
  }
  if (group_) group_members_ = members;
}

void WeightSyncer::deliver_broadcast(std::vector<Target>& targets, WeightSyncReport& report) {
  const Clock::time_point control = Clock::now();
  // A group needs every member: one engine out before the broadcast stops them all.
  auto out = std::find_if(targets.begin(), targets.end(), [](const Target& t) { return !t.ok(); });
  if (out != targets.end()) {
    const std::string why = "not synced: " + out->name() + " failed before the broadcast";
    for (Target& t : targets) {
      if (t.ok()) t.failure = why;
    }
  } else {
    form_group(targets);
  }
  report.control_seconds += seconds_since(control);
  if (!group_ || !targets.front().ok()) {
    walk_without_delivering(report);  // the other trainer ranks' gathers need this rank
    return;
  }
  const std::vector<weight_sync::BucketManifest>& plan = buckets_->plan();
  std::vector<actors::Future<int64_t>> receiving;
  for (Target& t : targets) {
    receiving.push_back(t.engine->call(&serving::RolloutEngine::receive_weight_buckets, plan));
  }
  // On the CPU in segments, which the engines on this host read at memory speed
  // (comm/same_host_collectives.h).
  const c10::Device device = model_.unit(0).master_shard().device();
  for (at::Tensor& buffer : broadcast_buffers_) {
    if (!buffer.defined()) buffer = empty_for_same_host_peers(largest_bucket_bytes(), device);
  }
  std::string broadcast_failure;
  if (agree_on_writing_into_root(true, report)) {
    broadcast_failure = write_into_root(report);
  } else {
    comm::WorkPtr sending;
    for (size_t k = 0; k < plan.size(); ++k) {
      at::Tensor buffer = broadcast_buffers_[k % 2].narrow(0, 0, plan[k].nbytes);
      pack(k, buffer, report);  // while bucket k-1 is on the wire
      if (sending) await_broadcast(sending, k - 1, broadcast_failure, report);
      if (broadcast_failure.empty()) sending = group_->broadcast_async(buffer, 0);
    }
    if (sending) await_broadcast(sending, plan.size() - 1, broadcast_failure, report);
  }
  // A failed broadcast (a member died) leaves the group out of step: the next sync forms a new
  // one. Closing this end now, before waiting for the engines, fails the receives they still
  // have pending from this rank at once; they would otherwise wait out --weight-sync-timeout.
  if (!broadcast_failure.empty()) group_.reset();
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < targets.size(); ++i) {
    await(receiving[i], "receiving the buckets", options_.timeout(), targets[i].failure);
    if (!broadcast_failure.empty() && targets[i].ok()) targets[i].failure = broadcast_failure;
  }
  report.transfer_seconds += seconds_since(start);
  // GPU memory goes back to training (and to a colocated engine) between syncs.
  if (broadcast_buffers_[0].is_cuda()) {
    broadcast_buffers_[0] = at::Tensor();
    broadcast_buffers_[1] = at::Tensor();
  }
}

void WeightSyncer::await_broadcast(comm::WorkPtr& sending, size_t bucket, std::string& failure,
                                   WeightSyncReport& report) {
  const Clock::time_point start = Clock::now();
  try {
    sending->wait();
  } catch (const std::exception& e) {
    failure = "broadcasting bucket " + std::to_string(bucket) + " of " +
              std::to_string(buckets_->plan().size()) + " failed: " + e.what();
  }
  sending.reset();
  report.transfer_seconds += seconds_since(start);
}

bool WeightSyncer::agree_on_writing_into_root(bool offer, WeightSyncReport& report) {
  // What every rank knows alike: the placement, the world and where the shards lie.
  const std::shared_ptr<comm::Communicator>& comm = model_.communicator();
  if (placement_ != EnginePlacement::kDisaggregated || !comm || comm->size() == 1 ||
      !model_.unit(0).master_shard().device().is_cpu()) {
    return false;
  }
  const Clock::time_point start = Clock::now();
  // Per buffer: rank 0's pid, then the descriptor, inode, offset and size of the segment it lies
  // in (core/shared_memory_segment.h); all zero when rank 0 does not offer.
  at::Tensor places = at::zeros({2, 5}, at::kLong);
  if (rank_ == 0 && offer && buckets_ == &all_ && writable_in_place(all_.tensors())) {
    for (int64_t i = 0; i < 2; ++i) {
      const at::Tensor& buffer = broadcast_buffers_[i];
      const std::optional<UnnamedSegmentPlace> place =
          find_unnamed_segment(buffer.data_ptr(), static_cast<size_t>(buffer.nbytes()));
      if (!place) {  // ordinary memory: no segment could be made
        places.zero_();
        break;
      }
      places[i] = at::tensor(
          {static_cast<int64_t>(::getpid()), static_cast<int64_t>(place->descriptor),
           static_cast<int64_t>(place->inode), static_cast<int64_t>(place->offset), place->size},
          at::kLong);
    }
  }
  comm->broadcast(places, 0);
  if (places[0][0].item<int64_t>() == 0) {  // every rank sees the same
    report.control_seconds += seconds_since(start);
    return false;
  }
  at::Tensor cannot = at::zeros({1}, at::kFloat);
  try {
    map_root_buffers(places);
  } catch (const std::exception& e) {
    OOZE_LOG(WARN) << "weight sync: trainer rank " << rank_ << " cannot map rank 0's broadcast "
                   << "buffers (" << e.what() << "); the units are gathered instead";
    cannot.fill_(1.0f);
  }
  comm->all_reduce(cannot, comm::ReduceOp::MAX);
  report.control_seconds += seconds_since(start);
  return cannot.item<float>() == 0.0f;
}

void WeightSyncer::map_root_buffers(const at::Tensor& places) {
  const int64_t bytes = largest_bucket_bytes();
  if (rank_ == 0) {
    for (int i = 0; i < 2; ++i) {
      if (!root_buffers_[i].is_same(broadcast_buffers_[i])) bucket_writers_.clear();
      root_buffers_[i] = broadcast_buffers_[i];
    }
    return;
  }
  if (root_segments_.size() != 2) root_segments_.resize(2);
  for (int64_t i = 0; i < 2; ++i) {
    const auto* published = places[i].data_ptr<int64_t>();
    const UnnamedSegmentPlace place{static_cast<int>(published[1]),
                                    static_cast<uint64_t>(published[2]),
                                    static_cast<uint64_t>(published[3]), published[4]};
    SharedMemorySegment& segment = root_segments_[static_cast<size_t>(i)];
    // A segment's inode is its own while this rank maps it: the same inode, the same buffer.
    if (segment.inode() == place.inode) continue;
    bucket_writers_.clear();  // they write into the old mapping
    segment = SharedMemorySegment();
    segment = open_unnamed_segment_of(published[0], place);
    root_buffers_[i] = segment.as_tensor().narrow(0, static_cast<int64_t>(place.offset), bytes);
  }
}

std::string WeightSyncer::write_into_root(WeightSyncReport& report) {
  const std::vector<weight_sync::BucketManifest>& plan = buckets_->plan();
  const std::shared_ptr<comm::Communicator>& comm = model_.communicator();
  const bool root = rank_ == 0;
  if (bucket_writers_.size() != plan.size()) {
    bucket_writers_.clear();
    bucket_writers_.resize(plan.size());
  }
  std::string failure;
  comm::WorkPtr sending;
  for (size_t k = 0; k < plan.size(); ++k) {
    at::Tensor buffer = root_buffers_[k % 2].narrow(0, 0, plan[k].nbytes);
    Clock::time_point start = Clock::now();
    // Rank 0 saw bucket k - 2 off before the barrier of bucket k - 1, so buffer k % 2 is free.
    std::string write_failure;
    try {
      std::unique_ptr<ShardSliceWriter>& writer = bucket_writers_[k];
      if (!writer) {
        writer = std::make_unique<ShardSliceWriter>(model_, all_.tensors(), plan[k], buffer);
      }
      writer->write(nullptr);
    } catch (const std::exception& e) {
      write_failure = "writing trainer rank " + std::to_string(rank_) + "'s slices of bucket " +
                      std::to_string(k) + " of " + std::to_string(plan.size()) +
                      " failed: " + e.what();
      if (!root) {
        OOZE_LOG(WARN) << "weight sync: " << write_failure;
      }
    }
    report.pack_seconds += seconds_since(start);
    // Bucket k - 1 off before the barrier: the others write bucket k + 1 into its buffer next.
    if (root && sending) await_broadcast(sending, k - 1, failure, report);
    if (root && failure.empty()) failure = write_failure;
    start = Clock::now();
    // Bucket k is whole once every rank is past this; any rank's failure stops every rank here.
    at::Tensor stop = at::full({1}, !write_failure.empty() || !failure.empty() ? 1.0f : 0.0f);
    comm->all_reduce(stop, comm::ReduceOp::MAX);
    report.control_seconds += seconds_since(start);
    if (stop.item<float>() != 0.0f) {
      if (root && failure.empty()) {
        failure = "another trainer rank could not write its slices of bucket " + std::to_string(k) +
                  " (see that rank's log)";
      }
      break;
    }
    if (!root) continue;
    if (options_.check) add_checksums(plan[k], buffer, trainer_checksums_);
    sending = group_->broadcast_async(buffer, 0);
  }
  if (sending) await_broadcast(sending, plan.size() - 1, failure, report);
  report.slices_written = true;
  return failure;
}

void WeightSyncer::check_checksums(std::vector<Target>& targets) {
  std::vector<std::optional<actors::Future<std::vector<std::pair<std::string, uint32_t>>>>> sums(
      targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].ok())
      sums[i] = targets[i].engine->call(&serving::RolloutEngine::weight_checksums);
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!sums[i]) continue;
    std::vector<std::pair<std::string, uint32_t>> engine_sums;
    if (!await(*sums[i], "--check-weight-sync: reading the engine's checksums", options_.timeout(),
               targets[i].failure, &engine_sums)) {
      continue;
    }
    const std::map<std::string, uint32_t> by_name(engine_sums.begin(), engine_sums.end());
    for (const weight_sync::BucketManifest& bucket :
         buckets_->plan()) {  // walk order: the first that differs
      for (const weight_sync::BucketEntry& entry : bucket.entries) {
        auto found = by_name.find(entry.name);
        const uint32_t expected = trainer_checksums_.at(entry.name);
        if (found == by_name.end() || found->second != expected) {
          std::ostringstream what;
          what << "--check-weight-sync: tensor '" << entry.name << "' (bucket " << bucket.index
               << ") differs from the trainer's: CRC-32 " << std::hex
               << (found == by_name.end() ? 0u : found->second) << " on the engine, " << expected
               << " on the trainer";
          if (found == by_name.end()) what << " (the engine has no such tensor)";
          targets[i].failure = what.str();
          break;
        }
      }
      if (!targets[i].ok()) break;
    }
  }
}

}  // namespace ooze::trainer
