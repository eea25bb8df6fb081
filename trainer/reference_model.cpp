#include "trainer/reference_model.h"

#include <utility>

#include "core/error.h"
#include "fsdp/sharded_loading.h"
#include "fsdp/storage.h"
#include "models/log_probs.h"
#include "models/model_config.h"

namespace ooze::trainer {

ReferenceModel::ReferenceModel(models::TransformerModel model,
                               std::shared_ptr<comm::Communicator> comm,
                               fsdp::FsdpTransformerOptions options) {
  for (torch::Tensor& parameter : model->parameters()) parameter.requires_grad_(false);
  options.activation_checkpointing = false;  // there is no backward to recompute for
  model_ = std::make_unique<fsdp::FsdpTransformer>(std::move(model), std::move(comm), options);
  // No backward ever runs: the gradient shards would only hold zeros.
  fsdp::FullyShardedModule& sharded = model_->sharded();
  for (size_t u = 0; u < sharded.num_units(); ++u)
    fsdp::release_storage(sharded.unit(u).grad_shard());
}

ReferenceModel ReferenceModel::copy_of(fsdp::FsdpTransformer& policy,
                                       fsdp::FsdpTransformerOptions options) {
  fsdp::FullyShardedModule& source = policy.sharded();
  // Uninitialised weights: every shard is overwritten below.
  ReferenceModel reference(models::TransformerModel(policy.model()->config()),
                           source.communicator(), options);
  fsdp::FullyShardedModule& target = reference.model_->sharded();
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < target.num_units(); ++u) {
    fsdp::FlatParam& to = target.unit(u);
    fsdp::FlatParam& from = source.unit(u);
    if (to.name() != from.name() || to.numel() != from.numel()) {
      throw Error("ReferenceModel::copy_of: unit " + std::to_string(u) + " of the policy is '" +
                  from.name() + "' with " + std::to_string(from.numel()) +
                  " elements, but the reference built from the same config has '" + to.name() +
                  "' with " + std::to_string(to.numel()));
    }
    to.reshard();
    to.master_shard().copy_(from.master_shard());  // padding included: zero
  }
  return reference;
}

ReferenceModel ReferenceModel::from_hf_checkpoint(const std::string& dir,
                                                  std::shared_ptr<comm::Communicator> comm,
                                                  fsdp::FsdpTransformerOptions options) {
  // Uninitialised weights: load_sharded_safetensors overwrites every shard.
  ReferenceModel reference(models::TransformerModel(models::load_model_config(dir)),
                           std::move(comm), options);
  fsdp::load_sharded_safetensors(reference.model_->sharded(), dir);
  return reference;
}

ResponseLogProbs ReferenceModel::compute_log_probs(const std::vector<fsdp::PackingSample>& samples,
                                                   const fsdp::PackingOptions& packing,
                                                   double temperature, bool with_entropy) {
  return trainer::compute_log_probs(*model_, samples, packing, temperature, with_entropy);
}

}  // namespace ooze::trainer
