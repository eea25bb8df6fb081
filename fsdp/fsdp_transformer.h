// A TransformerModel trained with fully sharded data parallelism: the training forward of
// models/transformer.h driven unit by unit through FullyShardedModule (fsdp/fully_shard.h).
//
// Units, in forward order: "model.embed_tokens" (only when the head is untied), then each
// "model.layers.N", then the root holding the rest: the final norm and lm_head, or the final
// norm and the tied embeddings (the tied matrix is used first and last, so it lives in the
// root, which stays gathered from the start of forward to the end of backward).
//
//   FsdpTransformer fsdp(model, comm, options);          // model initialised identically on
//   ShardedAdamW optimizer(fsdp.sharded(), adam_options); // every rank (or sync_module_states)
//   for each micro-batch:
//     torch::Tensor hidden = fsdp.forward(input_ids, position_ids, cu_seqlens);
//     auto out = models::compute_token_log_probs(hidden, fsdp.lm_head_weight(), targets);
//     fsdp.backward(-out.log_probs.mean() / num_micro_batches);  // accumulates into the shards
//   OptimizerStepResult result = clip_and_step(fsdp.sharded(), optimizer, lr, clip_grad);
//
// Scoring without gradients: forward under torch::NoGradGuard, use lm_head_weight(), then
// reshard().
//
// LoRA (models/lora.h, options.shard.replicate_frozen): the frozen base stays replicated in
// the module and only the adapters are sharded, one unit per layer; the embeddings, the final
// norm and the head then have no unit and run as plain modules.
//
// Context parallelism (options.context_parallel_size C > 1): the W ranks form W / C groups of C
// consecutive ranks (d * C .. d * C + C - 1); parameters stay sharded over all W ranks, while
// the ranks of one CP group share each micro-batch. Each rank runs forward_context_parallel on
// its share (models/context_parallel_split.h), attention exchanging keys and values over the
// group (models/ring_attention.h):
//
//   auto split = std::make_shared<const models::ContextParallelSplit>(
//       models::split_for_context_parallel(offsets, fsdp.cp_size(), fsdp.cp_rank()));
//   torch::Tensor hidden = fsdp.forward_context_parallel(split->shard(input_ids),
//                                                        split->shard(position_ids), split);
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "fsdp/fully_shard.h"
#include "models/attention.h"
#include "models/context_parallel_split.h"
#include "models/ring_attention.h"
#include "models/transformer.h"

namespace ooze::fsdp {

struct FsdpTransformerOptions {
  FullyShardOptions shard;
  // Recompute each decoder layer's activations in its backward instead of storing them.
  bool activation_checkpointing = false;
  // --context-parallel-size: ranks sharing each micro-batch; must divide the world size.
  int64_t context_parallel_size = 1;
  // --cp-impl: how attention gathers the keys and values of the CP group.
  models::ContextParallelImpl cp_impl = models::ContextParallelImpl::kRing;

  // The flags above and FullyShardOptions' ("fsdp" section).
  static const OptionFields<FsdpTransformerOptions>& fields();
};

class FsdpTransformer {
 public:
  // Shards `model`, whose parameters must already hold identical values on every rank (from
  // init_weights(seed), which is deterministic, or a checkpoint), unless
  // options.shard.sync_module_states. Afterwards use the model only through this object. With
  // context parallelism every rank forms its CP group here (a rendezvous of the group's ranks),
  // so the ranks construct their FsdpTransformers in the same order. Throws ooze::ConfigError
  // when context_parallel_size does not divide the world size.
  FsdpTransformer(models::TransformerModel model, std::shared_ptr<comm::Communicator> comm,
                  FsdpTransformerOptions options = {});

  // The unit prefixes for a model of this shape (the root is implicit).
  static std::vector<std::string> unit_prefixes(const models::ModelConfig& config);

  // The packed forward of TransformerModel::forward: hidden states after the final norm,
  // [T, hidden_size] in the compute dtype. The root unit stays gathered until backward() or
  // reshard(). Throws ooze::Error on malformed inputs, before any collective.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& cu_seqlens);
  // The same forward for this rank's share of a micro-batch under context parallelism:
  // input_ids and position_ids [T_local] in the local layout of `split` (made for cp_rank() of
  // cp_size()); padding tokens may hold any id and position. Returns [T_local, hidden_size].
  // Every rank of the CP group must run it on the same micro-batch layout at the same time.
  torch::Tensor forward_context_parallel(const torch::Tensor& input_ids,
                                         const torch::Tensor& position_ids,
                                         std::shared_ptr<const models::ContextParallelSplit> split);
  int64_t cp_size() const { return options_.context_parallel_size; }
  int64_t cp_rank() const { return cp_group_ ? cp_group_->rank() : 0; }
  // The CP group (null when cp_size() == 1).
  const std::shared_ptr<comm::Communicator>& cp_group() const { return cp_group_; }

  // The [vocab_size, hidden_size] head matrix (gathered, compute dtype, requires grad), for
  // models::compute_token_log_probs. Valid between forward() and backward()/reshard().
  torch::Tensor lm_head_weight();
  // The same for a value model's head (score.weight, [1, hidden_size]).
  torch::Tensor value_head_weight();
  // loss.backward(), then the gradients of this micro-batch are reduce-scattered and added to
  // the fp32 gradient shards, and every unit is resharded (the root only once no other
  // forward's backward is outstanding: several micro-batches may run forward first).
  void backward(const torch::Tensor& loss);
  // Frees gathered parameters after a forward that has no backward (forgets such forwards).
  void reshard() {
    graphs_in_flight_ = 0;
    sharded_->reshard_all();
  }
  void zero_grad() { sharded_->zero_grad(); }

  void sleep() { sharded_->sleep(); }
  void wake_up() { sharded_->wake_up(); }

  FullyShardedModule& sharded() { return *sharded_; }
  models::TransformerModel& model() { return model_; }
  const FsdpTransformerOptions& options() const { return options_; }

 private:
  // embed, the layers (each attending as `attend` says), the final norm: both forwards.
  using AttendBlock = std::function<torch::Tensor(models::DecoderLayerImpl*, const torch::Tensor&,
                                                  const models::RotaryTables&)>;
  torch::Tensor run_layers(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                           const AttendBlock& attend);

  models::TransformerModel model_;
  FsdpTransformerOptions options_;
  std::shared_ptr<comm::Communicator> cp_group_;
  std::unique_ptr<FullyShardedModule> sharded_;
  // Absent: the part has no unit (tied embeddings; frozen parts with replicate_frozen).
  std::optional<size_t> embed_unit_;
  std::vector<std::optional<size_t>> layer_units_;
  std::optional<size_t> root_unit_;
  int graphs_in_flight_ = 0;  // forwards with grad whose backward has not run yet
};

}  // namespace ooze::fsdp
