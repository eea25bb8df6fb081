// The frozen reference model of KL-regularised RL: a sharded copy of the initial policy (or of
// another Hugging Face checkpoint) that only scores tokens. It is an FsdpTransformer whose
// parameters do not require grad, with no optimizer and no gradient shards (their memory is
// released): per rank it holds only its fp32 master shards, 1/W of the weights.
//
//   ReferenceModel reference = ReferenceModel::copy_of(policy);    // before the first step
//   ResponseLogProbs ref = reference.compute_log_probs(samples, packing_options);
//
// Log-probs come from the policy's own scoring path (compute_log_probs in train_step.h:
// the same plan, pack and forward, fp32 log-probs under NoGradGuard, every unit resharded
// afterwards). It is a collective over the model's group, like any forward of a sharded model:
// every rank calls it, each with its own samples.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/packing.h"
#include "models/transformer.h"
#include "trainer/train_step.h"

namespace ooze::trainer {

class ReferenceModel {
 public:
  // Freezes and shards `model`, whose parameters must hold identical weights on every rank
  // (as for FsdpTransformer). `comm`: the sharding group; null means one rank.
  ReferenceModel(models::TransformerModel model, std::shared_ptr<comm::Communicator> comm,
                 fsdp::FsdpTransformerOptions options = {});

  // A copy of `policy`'s weights now (its fp32 master shards, exactly), sharded over the same
  // group: call it before the first optimizer step to freeze the initial policy. Not a
  // collective: every rank copies its own shards. `options` may differ from the policy's (e.g.
  // bf16 compute); the shards do not depend on them.
  static ReferenceModel copy_of(fsdp::FsdpTransformer& policy,
                                fsdp::FsdpTransformerOptions options = {});

  // The weights of the Hugging Face model directory `dir` (config.json and safetensors); each
  // rank reads only its own shards (fsdp/sharded_loading.h). Throws as load_model_config and
  // load_sharded_safetensors do.
  static ReferenceModel from_hf_checkpoint(const std::string& dir,
                                           std::shared_ptr<comm::Communicator> comm,
                                           fsdp::FsdpTransformerOptions options = {});

  // log p of each response token of each sample at `temperature`, as compute_log_probs.
  ResponseLogProbs compute_log_probs(const std::vector<fsdp::PackingSample>& samples,
                                     const fsdp::PackingOptions& packing, double temperature = 1.0,
                                     bool with_entropy = false);

  const models::ModelConfig& config() const { return model_->model()->config(); }
  const models::TransformerModel& model() const { return model_->model(); }
  const fsdp::FullyShardedModule& sharded() const { return model_->sharded(); }
  // The frozen sharded model itself, for a forward of one's own (self-distillation's teacher).
  fsdp::FsdpTransformer& transformer() { return *model_; }

 private:
  std::unique_ptr<fsdp::FsdpTransformer> model_;
};

}  // namespace ooze::trainer
