// The frozen reference model of KL-regularised RL: a sharded copy of the initial policy (or of
// another Hugging Face checkpoint) that only scores tokens. It is an FsdpTransformer whose
// parameters do not require grad, with no optimizer and no gradient shards (their memory is
// released): per rank it holds only its fp32 master shards, 1/W of the weights.
//
//   ReferenceModel reference = ReferenceModel::copy_of(policy);    // before the first step
//   torch::Tensor ref_log_probs = reference.compute_log_probs(input_ids, position_ids,
//                                                             cu_seqlens, targets);
//
// Log-probs are computed in fp32 (models::compute_token_log_probs) under NoGradGuard, and every
// unit is resharded afterwards. compute_log_probs is a collective over the model's group, like
// any forward of a sharded model: every rank calls it, each with its own packed micro-batch.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "fsdp/fsdp_transformer.h"
#include "models/transformer.h"

namespace ooze::fsdp {

class ReferenceModel {
 public:
  // Freezes and shards `model`, whose parameters must hold identical weights on every rank
  // (as for FsdpTransformer). `comm`: the sharding group; null means one rank.
  ReferenceModel(models::TransformerModel model, std::shared_ptr<comm::Communicator> comm,
                 FsdpTransformerOptions options = {});

  // A copy of `policy`'s weights now (its fp32 master shards, exactly), sharded over the same
  // group: call it before the first optimizer step to freeze the initial policy. Not a
  // collective: every rank copies its own shards. `options` may differ from the policy's (e.g.
  // bf16 compute); the shards do not depend on them.
  static ReferenceModel copy_of(FsdpTransformer& policy, FsdpTransformerOptions options = {});

  // The weights of the Hugging Face model directory `dir` (config.json and safetensors); each
  // rank reads only its own shards (fsdp/sharded_loading.h). Throws as load_model_config and
  // load_sharded_safetensors do.
  static ReferenceModel from_hf_checkpoint(const std::string& dir,
                                           std::shared_ptr<comm::Communicator> comm,
                                           FsdpTransformerOptions options = {});

  // log p(targets[t] | tokens up to t) for every token of the packed batch (the inputs of
  // FsdpTransformer::forward; targets [T] int64), divided by `temperature` before the softmax
  // as for rollouts sampled at that temperature: [T] fp32.
  torch::Tensor compute_log_probs(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                  const torch::Tensor& cu_seqlens, const torch::Tensor& targets,
                                  double temperature = 1.0);

  const models::ModelConfig& config() const { return model_->model()->config(); }
  const models::TransformerModel& model() const { return model_->model(); }
  const FullyShardedModule& sharded() const { return model_->sharded(); }

 private:
  std::unique_ptr<FsdpTransformer> model_;
};

}  // namespace ooze::fsdp
