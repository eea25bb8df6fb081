#include "fsdp/fsdp_transformer.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "core/error.h"
#include "models/activation_checkpoint.h"
#include "models/causal_attention.h"

namespace ooze::fsdp {
namespace {

const char* kEmbedPrefix = "model.embed_tokens";

std::string layer_prefix(size_t index) { return "model.layers." + std::to_string(index); }

void check_inputs(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                  int64_t vocab_size) {
  if (!input_ids.defined() || input_ids.dim() != 1 ||
      (input_ids.scalar_type() != torch::kLong && input_ids.scalar_type() != torch::kInt)) {
    throw Error("FsdpTransformer::forward: input_ids must be a 1-D int64 tensor, got " +
                (input_ids.defined() ? std::to_string(input_ids.dim()) + "-D " +
                                           c10::toString(input_ids.scalar_type())
                                     : std::string("an undefined tensor")));
  }
  if (input_ids.numel() > 0) {
    const int64_t low = input_ids.min().item<int64_t>(), high = input_ids.max().item<int64_t>();
    if (low < 0 || high >= vocab_size) {
      throw Error("FsdpTransformer::forward: input_ids holds token id " +
                  std::to_string(low < 0 ? low : high) + " outside the vocabulary [0, " +
                  std::to_string(vocab_size) + ")");
    }
  }
  if (!position_ids.defined() || position_ids.dim() != 1 ||
      position_ids.size(0) != input_ids.size(0)) {
    throw Error(
        "FsdpTransformer::forward: position_ids must be a 1-D tensor with one position "
        "per token (" +
        std::to_string(input_ids.size(0)) + "), got shape " +
        (position_ids.defined() ? c10::str(position_ids.sizes()) : "undefined"));
  }
}

}  // namespace

const OptionFields<FsdpTransformerOptions>& FsdpTransformerOptions::fields() {
  using O = FsdpTransformerOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("fsdp");
    f.include("shard", &O::shard, FullyShardOptions::fields());
    f.add("gradient_checkpointing", &O::activation_checkpointing,
          "Recompute each decoder layer's activations in backward instead of keeping them.");
    f.add("context_parallel_size", &O::context_parallel_size,
          "Context parallelism: groups of this many trainer ranks share every micro-batch, each "
          "holding 1/C of its tokens (--max-tokens-per-gpu then counts a rank's share); must "
          "divide the trainer's world size.")
        .min(1);
    f.add_enum("cp_impl", &O::cp_impl,
               {models::ContextParallelImpl::kRing, models::ContextParallelImpl::kAllGather},
               models::context_parallel_impl_name,
               "How context-parallel attention gets the other ranks' keys and values: passed "
               "around a ring while computing, or all-gathered at once.");
    return f;
  }();
  return fields;
}

std::vector<std::string> FsdpTransformer::unit_prefixes(const models::ModelConfig& config) {
  std::vector<std::string> prefixes;
  if (!config.tie_word_embeddings) prefixes.push_back(kEmbedPrefix);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) prefixes.push_back(layer_prefix(i));
  return prefixes;
}

FsdpTransformer::FsdpTransformer(models::TransformerModel model,
                                 std::shared_ptr<comm::Communicator> comm,
                                 FsdpTransformerOptions options)
    : model_(std::move(model)), options_(options) {
  sharded_ = std::make_unique<FullyShardedModule>(*model_, unit_prefixes(model_->config()),
                                                  std::move(comm), options_.shard);
  // Units of frozen parameters do not exist with replicate_frozen (a LoRA base): those parts of
  // the model run as plain modules.
  if (!model_->config().tie_word_embeddings) embed_unit_ = sharded_->find_unit(kEmbedPrefix);
  for (size_t i = 0; i < model_->layers().size(); ++i) {
    layer_units_.push_back(sharded_->find_unit(layer_prefix(i)));
  }
  root_unit_ = sharded_->root_unit();
  if (!root_unit_ && !options_.shard.replicate_frozen) {
    throw Error(
        "FsdpTransformer: the model has no root parameters (final norm); this is not a "
        "TransformerModel layout");
  }
  const int64_t cp_size = options_.context_parallel_size;
  const int world = sharded_->world_size();
  if (cp_size < 1 || world % cp_size != 0) {
    throw ConfigError("FsdpTransformer: context_parallel_size = " + std::to_string(cp_size) +
                      " must be at least 1 and divide the world size " + std::to_string(world) +
                      " (--context-parallel-size)");
  }
  if (cp_size > 1) {
    // A fresh name per CP model of the process (the policy's, the reference's, ...): the ranks
    // build their models in the same order, so the n-th one of every rank rendezvous together.
    static std::atomic<int64_t> cp_models{0};
    const int64_t serial = cp_models.fetch_add(1);
    const int group = sharded_->rank() / static_cast<int>(cp_size);
    std::vector<int> ranks;
    for (int64_t r = 0; r < cp_size; ++r) ranks.push_back(group * static_cast<int>(cp_size) + r);
    cp_group_ = sharded_->communicator()->new_group(
        ranks, "cp" + std::to_string(serial) + "." + std::to_string(group));
  }
}

torch::Tensor FsdpTransformer::forward(const torch::Tensor& input_ids,
                                       const torch::Tensor& position_ids,
                                       const torch::Tensor& cu_seqlens) {
  check_inputs(input_ids, position_ids, model_->config().vocab_size);
  const std::vector<int64_t> offsets = models::sequence_offsets(cu_seqlens, input_ids.size(0));
  return run_layers(
      input_ids, position_ids,
      [offsets](models::DecoderLayerImpl* layer, const torch::Tensor& x,
                const models::RotaryTables& rope) { return layer->forward(x, rope, offsets); });
}

torch::Tensor FsdpTransformer::forward_context_parallel(
    const torch::Tensor& input_ids, const torch::Tensor& position_ids,
    std::shared_ptr<const models::ContextParallelSplit> split) {
  check_inputs(input_ids, position_ids, model_->config().vocab_size);
  if (!cp_group_) {
    throw Error(
        "FsdpTransformer::forward_context_parallel: this model has no context-parallel group "
        "(context_parallel_size = 1); use forward()");
  }
  if (!split || split->cp_size != cp_size() || split->cp_rank != cp_rank() ||
      split->num_local_tokens() != input_ids.size(0)) {
    throw Error("FsdpTransformer::forward_context_parallel: the split must be made for CP rank " +
                std::to_string(cp_rank()) + " of " + std::to_string(cp_size()) + " and hold the " +
                std::to_string(input_ids.size(0)) + " local tokens given" +
                (split ? "; it is for rank " + std::to_string(split->cp_rank) + " of " +
                             std::to_string(split->cp_size) + " with " +
                             std::to_string(split->num_local_tokens()) + " tokens"
                       : std::string("; it is null")));
  }
  const models::ContextParallelAttention cp{std::move(split), cp_group_, options_.cp_impl};
  return run_layers(input_ids, position_ids,
                    [cp](models::DecoderLayerImpl* layer, const torch::Tensor& x,
                         const models::RotaryTables& rope) { return layer->forward(x, rope, cp); });
}

torch::Tensor FsdpTransformer::run_layers(const torch::Tensor& input_ids,
                                          const torch::Tensor& position_ids,
                                          const AttendBlock& attend) {
  const std::optional<size_t> first_layer =
      layer_units_.empty() ? std::nullopt : layer_units_.front();

  // The root first (the tied embeddings need it at once), the next unit in flight meanwhile.
  if (root_unit_) sharded_->unshard_async(*root_unit_);
  if (options_.shard.prefetch) {
    if (embed_unit_) {
      sharded_->unshard_async(*embed_unit_);
    } else if (first_layer) {
      sharded_->unshard_async(*first_layer);
    }
  }
  if (root_unit_) sharded_->hold_unsharded(*root_unit_);
  if (torch::GradMode::is_enabled()) ++graphs_in_flight_;

  torch::Tensor hidden;
  if (embed_unit_) {
    models::TransformerModelImpl* impl = model_.get();
    hidden = sharded_->run_unit(
        *embed_unit_, [impl, input_ids](const torch::Tensor&) { return impl->embed(input_ids); },
        torch::Tensor(), first_layer);
  } else {
    hidden = model_->embed(input_ids);
  }
  const models::RotaryTables rope = model_->rotary_tables(position_ids.to(hidden.device()));
  for (size_t i = 0; i < layer_units_.size(); ++i) {
    models::DecoderLayerImpl* layer = model_->layers()[i].get();
    // Captured by value: with checkpointing the block runs again in backward.
    FullyShardedModule::UnitBlock block = [layer, rope, attend](const torch::Tensor& x) {
      return attend(layer, x, rope);
    };
    if (options_.activation_checkpointing) {
      block = [run = block, params = layer->parameters()](const torch::Tensor& x) {
        return models::checkpointed(run, x, params);
      };
    }
    if (!layer_units_[i]) {  // wholly frozen and replicated: an ordinary module
      hidden = block(hidden);
      continue;
    }
    const std::optional<size_t> next =
        i + 1 < layer_units_.size() ? layer_units_[i + 1] : std::nullopt;
    hidden = sharded_->run_unit(*layer_units_[i], block, hidden, next);
  }
  return model_->final_norm()->forward(hidden);
}

torch::Tensor FsdpTransformer::lm_head_weight() {
  if (root_unit_ && !sharded_->unit(*root_unit_).is_unsharded()) {
    throw Error(
        "FsdpTransformer::lm_head_weight: the head is not gathered; call it between "
        "forward() and backward()/reshard()");
  }
  return model_->lm_head_weight();
}

torch::Tensor FsdpTransformer::value_head_weight() {
  if (root_unit_ && !sharded_->unit(*root_unit_).is_unsharded()) {
    throw Error(
        "FsdpTransformer::value_head_weight: the head is not gathered; call it between "
        "forward() and backward()/reshard()");
  }
  if (model_->head() != models::ModelHead::kValue) {
    throw Error("FsdpTransformer::value_head_weight: the model has a language-model head");
  }
  return model_->value_head()->weight;
}

void FsdpTransformer::backward(const torch::Tensor& loss) {
  if (!loss.defined() || loss.numel() != 1 || !loss.requires_grad()) {
    throw Error(
        "FsdpTransformer::backward: the loss must be a scalar that requires grad (computed "
        "from forward() and lm_head_weight() with grad enabled)");
  }
  loss.backward();
  graphs_in_flight_ = std::max(graphs_in_flight_ - 1, 0);
  sharded_->finish_backward(/*release_held=*/graphs_in_flight_ == 0);
}

}  // namespace ooze::fsdp
