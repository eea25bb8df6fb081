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
//   StepResult result = clip_and_step(fsdp.sharded(), optimizer, lr, clip_grad);
//
// Scoring without gradients: forward under torch::NoGradGuard, use lm_head_weight(), then
// reshard().
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "fsdp/fully_shard.h"
#include "models/transformer.h"

namespace ooze::fsdp {

struct FsdpTransformerOptions {
  FullyShardOptions shard;
  // Recompute each decoder layer's activations in its backward instead of storing them.
  bool activation_checkpointing = false;
};

class FsdpTransformer {
 public:
  // Shards `model`, whose parameters must already hold identical values on every rank (from
  // init_weights(seed), which is deterministic, or a checkpoint), unless
  // options.shard.sync_module_states. Afterwards use the model only through this object.
  FsdpTransformer(models::TransformerModel model, std::shared_ptr<comm::Communicator> comm,
                  FsdpTransformerOptions options = {});

  // The unit prefixes for a model of this shape (the root is implicit).
  static std::vector<std::string> unit_prefixes(const models::ModelConfig& config);

  // The packed forward of TransformerModel::forward: hidden states after the final norm,
  // [T, hidden_size] in the compute dtype. The root unit stays gathered until backward() or
  // reshard(). Throws ooze::Error on malformed inputs, before any collective.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& cu_seqlens);
  // The [vocab_size, hidden_size] head matrix (gathered, compute dtype, requires grad), for
  // models::compute_token_log_probs. Valid between forward() and backward()/reshard().
  torch::Tensor lm_head_weight();
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
  models::TransformerModel model_;
  FsdpTransformerOptions options_;
  std::unique_ptr<FullyShardedModule> sharded_;
  std::optional<size_t> embed_unit_;  // untied embeddings only
  std::vector<size_t> layer_units_;
  size_t root_unit_ = 0;
  int graphs_in_flight_ = 0;  // forwards with grad whose backward has not run yet
};

}  // namespace ooze::fsdp
