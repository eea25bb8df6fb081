// The rollout engine as an actor: an Engine (engine/engine.h) in its own worker process, so the
// RL loop places engines with the actor runtime, beside trainer ranks on the same GPUs
// (fractional resources, or a placement group's bundles) or on GPUs of their own. RolloutEngine
// is the Engine, so a handle calls the engine's own methods; it adds what only an actor needs:
// a batch of requests in one call, the receiving end of a weight sync, and the engine's HTTP
// server (serving/engine_server.h) inside the actor, so agent code the rollout calls reaches the
// same engine over HTTP.
//
//   actors::ActorOptions options = rollout_engine_actor_options({{"CPU", 1}, {"GPU", 0.5}});
//   EngineOptions engine;
//   engine.model_dir = "/models/qwen3";           // device "auto": the actor's GPU, else the CPU
//   auto actor = actors::spawn<RolloutEngine>(options, engine);
//   auto outputs = actor.call(&RolloutEngine::generate_all, requests).get();  // [request][sample]
//   std::string url = actor.call(&RolloutEngine::start_server, std::string(), 0,
//                                std::string()).get();       // "http://NODE_ADDRESS:PORT"
//   actor.call(&RolloutEngine::release_memory).get();   // the trainer takes the GPU
//   ... train ...
//   actor.call(&RolloutEngine::resume_memory).get();
//   actor.call(&RolloutEngine::load_weights, named_tensors, std::optional<int64_t>(step)).get();
//   // weight sync from a trainer: trainer::WeightSyncer calls the weight-sync methods
//
// Every Engine method whose arguments and result travel on the wire is registered; submit() (a
// callback), tokenizer() and model_config() are for callers in the actor's process. A call
// gives every argument, defaulted ones too.
//
// Calls that overlap. The runtime runs an actor's calls on max_concurrency threads (1 by
// default: one call at a time, in the order each caller made them). With one thread, abort() or
// pause_generation() sent while generate_all() runs waits until generate_all() has returned,
// which defeats them. Spawn with rollout_engine_actor_options() (max_concurrency 8) so they reach
// the engine during a generate: every method is safe to run alongside any other, because the
// Engine serialises its controls itself. The price is the runtime's: with more than one thread,
// calls no longer run in the order they were made, so wait for a control call's future (say
// load_weights) before sending the calls that must see its effect. The HTTP server, when
// started, takes requests and aborts from any number of clients whatever the actor's threads.
#pragma once

#include <ATen/core/Tensor.h>

#include <cereal/types/utility.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/runtime.h"
#include "core/tensor_serialization.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "engine/request_serialization.h"
#include "weight_sync/bucket.h"
#include "weight_sync/weight_receiver.h"

namespace ooze::serving {

class EngineServer;

// Executor threads a RolloutEngine actor should have, so controls reach it during generate().
constexpr unsigned kRolloutEngineConcurrency = 8;

// ActorOptions for a RolloutEngine: `resources`, label "RolloutEngine" and
// kRolloutEngineConcurrency executor threads.
actors::ActorOptions rollout_engine_actor_options(actors::ResourceSet resources = {{"CPU", 1}});

// The device an engine in this process computes on when its options say "auto" (or nothing):
// the GPU the node gave the worker (cuda:$OOZE_DEVICE_INDEX, 0 when unset) when CUDA is
// available, else the CPU. Any other name is returned unchanged.
std::string resolve_engine_device(const std::string& device);

class RolloutEngine : public engine::Engine {
 public:
  // Starts the engine (model, tokenizer, KV cache, loop) with options.device resolved by
  // resolve_engine_device. Errors loading the model make the actor dead with their message.
  explicit RolloutEngine(engine::EngineOptions options);
  // Stops the server first (its exchanges still hold the engine), then the engine.
  ~RolloutEngine();

  // Submits every request at once, so they batch, and waits for all of them: result r holds
  // request r's n finished outputs in sample order. Requests are validated as they are
  // submitted; when one is refused (InvalidRequest naming its index and field) the ones
  // already submitted are aborted and waited for before the error is thrown. stream is ignored
  // (only finished outputs come back).
  std::vector<std::vector<engine::GenerateOutput>> generate_all(
      std::vector<engine::GenerateRequest> requests);

  // How a weight sync's bytes arrive (weight_sync/weight_receiver.h): the trainer
  // (trainer/weight_syncer.h) calls these between Engine::begin_weight_sync and
  // Engine::finish_weight_sync.
  void open_shared_weight_buffers(const weight_sync::SharedWeightBuffers& buffers);
  weight_sync::SharedParameters share_parameters();
  void shared_parameters_written();
  void load_shared_weight_bucket(int slot, const weight_sync::BucketManifest& manifest);
  void join_weight_sync_group(const weight_sync::BroadcastGroupSpec& spec);
  // Receives the buckets by broadcast and loads them; returns the bytes received.
  int64_t receive_weight_buckets(const std::vector<weight_sync::BucketManifest>& manifests);

  // Starts the engine's HTTP server in this process on this engine and returns its URL
  // ("http://HOST:PORT"). host empty: the address of the node the actor runs on
  // (actors::node_address(): what the node's other peers reach it at; 127.0.0.1 on one machine
  // and outside a worker). port 0: an ephemeral one. api_key non-empty: requests need
  // "Authorization: Bearer KEY". Throws Error when a server is already running (stop it first)
  // and ServerError when the address cannot be bound.
  std::string start_server(const std::string& host, int port, const std::string& api_key);
  // Stops the server (requests in flight are closed); a no-op when none runs.
  void stop_server();

 private:
  weight_sync::WeightReceiver receiver_;
  std::mutex server_mutex_;
  std::unique_ptr<EngineServer> server_;
};

}  // namespace ooze::serving
