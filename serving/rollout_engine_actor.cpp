#include "serving/rollout_engine_actor.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <mutex>

#include "actors/actor_class.h"
#include "core/error.h"
#include "serving/engine_server.h"
#include "serving/http_server.h"

namespace ooze::serving {

actors::ActorOptions rollout_engine_actor_options(actors::ResourceSet resources) {
  actors::ActorOptions options;
  options.resources = std::move(resources);
  options.max_concurrency = kRolloutEngineConcurrency;
  options.label = "RolloutEngine";
  return options;
}

std::string resolve_engine_device(const std::string& device) {
  if (!device.empty() && device != "auto") return device;
  if (!torch::cuda::is_available()) return "cpu";
  const char* index = std::getenv("OOZE_DEVICE_INDEX");
  return "cuda:" + std::string(index != nullptr && *index != '\0' ? index : "0");
}

namespace {

engine::EngineOptions with_resolved_device(engine::EngineOptions options) {
  options.device = resolve_engine_device(options.device);
  // The worker's own threads (weight loading, tensors arriving) follow the engine's setting,
  // not only the engine loop's.
  if (options.intra_op_threads > 0) at::set_num_threads(options.intra_op_threads);
  return options;
}

// The finished outputs of the requests one generate() call submitted, filled in from the
// engine's thread.
struct Collected {
  explicit Collected(size_t requests) : outputs(requests) {}
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::vector<engine::GenerateOutput>> outputs;
  int64_t remaining = 0;  // samples submitted and not finished yet

  void wait_until_finished() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return remaining == 0; });
  }
};

// The message of an InvalidRequest without its "field: " prefix.
std::string reason_of(const engine::InvalidRequest& error) {
  const std::string what = error.what();
  const std::string prefix = error.field() + ": ";
  return what.compare(0, prefix.size(), prefix) == 0 ? what.substr(prefix.size()) : what;
}

}  // namespace

RolloutEngine::RolloutEngine(engine::EngineOptions options)
    : engine::Engine(with_resolved_device(std::move(options))), receiver_(*this) {
  cleanup_stale_segments();  // left by trainers that died mid-sync
}

RolloutEngine::~RolloutEngine() { stop_server(); }

std::vector<std::vector<engine::GenerateOutput>> RolloutEngine::generate_all(
    std::vector<engine::GenerateRequest> requests) {
  const size_t count = requests.size();
  auto collected = std::make_shared<Collected>(count);
  std::vector<std::string> submitted;
  for (size_t r = 0; r < count; ++r) {
    engine::GenerateRequest request = std::move(requests[r]);
    request.stream = false;
    const int64_t n = request.sampling.n;
    {
      // Counted before submitting: the engine may finish the request before submit returns.
      std::lock_guard<std::mutex> lock(collected->mutex);
      collected->remaining += n;
    }
    auto on_update = [collected, r](const engine::GenerateOutput& output) {
      if (!output.finished) return;
      std::lock_guard<std::mutex> lock(collected->mutex);
      std::vector<engine::GenerateOutput>& samples = collected->outputs[r];
      const auto index = static_cast<size_t>(output.index);
      if (samples.size() <= index) samples.resize(index + 1);
      samples[index] = output;
      --collected->remaining;
      collected->changed.notify_all();
    };
    // The requests already queued would run for nobody: abort them and let them finish before
    // the caller hears why.
    auto withdraw = [&] {
      {
        std::lock_guard<std::mutex> lock(collected->mutex);
        collected->remaining -= n;
      }
      for (const std::string& id : submitted) abort(id);
      collected->wait_until_finished();
    };
    try {
      submitted.push_back(submit(std::move(request), std::move(on_update)));
    } catch (const engine::InvalidRequest& error) {
      withdraw();
      throw engine::InvalidRequest(error.field(), "request " + std::to_string(r) + " of " +
                                                      std::to_string(count) + ": " +
                                                      reason_of(error));
    } catch (...) {
      withdraw();
      throw;
    }
  }
  collected->wait_until_finished();
  std::lock_guard<std::mutex> lock(collected->mutex);
  return std::move(collected->outputs);
}

void RolloutEngine::open_shared_weight_buffers(const weight_sync::SharedWeightBuffers& buffers) {
  receiver_.open_shared_buffers(buffers);
}
weight_sync::SharedParameters RolloutEngine::share_parameters() {
  return receiver_.share_parameters();
}
void RolloutEngine::shared_parameters_written() { receiver_.shared_parameters_written(); }
void RolloutEngine::load_shared_weight_bucket(int slot,
                                              const weight_sync::BucketManifest& manifest) {
  receiver_.load_shared_bucket(slot, manifest);
}
void RolloutEngine::join_weight_sync_group(const weight_sync::BroadcastGroupSpec& spec) {
  receiver_.join_broadcast_group(spec);
}
int64_t RolloutEngine::receive_weight_buckets(
    const std::vector<weight_sync::BucketManifest>& manifests) {
  return receiver_.receive_broadcast(manifests);
}

std::string RolloutEngine::start_server(const std::string& host, int port,
                                        const std::string& api_key) {
  if (port < 0 || port > std::numeric_limits<uint16_t>::max()) {
    throw ConfigError("RolloutEngine::start_server: port " + std::to_string(port) +
                      " is out of range; give 0 (an ephemeral port) or 1..65535");
  }
  std::lock_guard<std::mutex> lock(server_mutex_);
  if (server_) {
    throw Error("RolloutEngine::start_server: a server already runs at " + server_->url() +
                "; call stop_server first");
  }
  ServerOptions options;
  // Where the node says its workers are reached: the driver's router may be on another machine.
  options.host = host.empty() ? actors::node_address() : host;
  options.port = static_cast<uint16_t>(port);
  options.api_key = api_key;
  server_ = std::make_unique<EngineServer>(*this, options);
  return server_->url();
}

void RolloutEngine::stop_server() {
  std::unique_ptr<EngineServer> server;
  {
    std::lock_guard<std::mutex> lock(server_mutex_);
    server = std::move(server_);
  }
  // Destroyed outside the lock: stopping waits for the server's threads.
  server.reset();
}

namespace {
// The Engine's methods spelled through RolloutEngine: C++ types them as engine::Engine's, and a
// handle finds them spelled either way.
const auto rollout_engine_class =
    actors::ActorClass<RolloutEngine>("RolloutEngine")
        .constructor<engine::EngineOptions>()
        .method("generate", &RolloutEngine::generate)
        .method("abort", &RolloutEngine::abort)
        .method("abort_all", &RolloutEngine::abort_all)
        .method("pause_generation", &RolloutEngine::pause_generation)
        .method("continue_generation", &RolloutEngine::continue_generation)
        .method("flush_cache", &RolloutEngine::flush_cache)
        .method("release_memory", &RolloutEngine::release_memory)
        .method("resume_memory", &RolloutEngine::resume_memory)
        .method("load_weights", &RolloutEngine::load_weights)
        .method("stats", &RolloutEngine::stats)
        .method("info", &RolloutEngine::info)
        .method("begin_weight_sync", &RolloutEngine::begin_weight_sync)
        .method("load_weight_bucket", &RolloutEngine::load_weight_bucket)
        .method("finish_weight_sync", &RolloutEngine::finish_weight_sync)
        .method("abort_weight_sync", &RolloutEngine::abort_weight_sync)
        .method("weight_device", &RolloutEngine::weight_device)
        .method("weight_checksums", &RolloutEngine::weight_checksums)
        .method("generate_all", &RolloutEngine::generate_all)
        .method("open_shared_weight_buffers", &RolloutEngine::open_shared_weight_buffers)
        .method("share_parameters", &RolloutEngine::share_parameters)
        .method("shared_parameters_written", &RolloutEngine::shared_parameters_written)
        .method("load_shared_weight_bucket", &RolloutEngine::load_shared_weight_bucket)
        .method("join_weight_sync_group", &RolloutEngine::join_weight_sync_group)
        .method("receive_weight_buckets", &RolloutEngine::receive_weight_buckets)
        .method("start_server", &RolloutEngine::start_server)
        .method("stop_server", &RolloutEngine::stop_server);
}  // namespace

}  // namespace ooze::serving
