#include "trainer/train_step.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>

#include "algorithms/sft_loss.h"
#include "algorithms/vocabulary_distillation.h"
#include "core/error.h"
#include "fsdp/context_parallel_gather.h"
#include "fsdp/optimizer_step.h"
#include "models/causal_attention.h"
#include "models/context_parallel_split.h"
#include "models/log_probs.h"
#include "models/log_softmax.h"
#include "models/lora.h"
#include "trainer/python_loss.h"

namespace ooze::trainer {
namespace {

using algorithms::LossMetrics;

// Where the model computes: its master shards' device.
at::Device device_of(fsdp::FsdpTransformer& model) {
  return model.sharded().unit(0).master_shard().device();
}

// A micro-batch of one padding token that nothing counts (loss mask 0, values 0), with the
// value names of `samples`. An empty micro-batch still runs the model, since its gathers and
// reduce-scatters are collectives the other ranks wait on; this one adds exactly nothing.
fsdp::PackedMicroBatch padding_micro_batch(const std::vector<fsdp::PackingSample>& samples) {
  fsdp::PackingSample padding;
  padding.tokens = at::zeros({1}, at::kLong);
  padding.response_length = 0;
  if (!samples.empty()) {
    for (const auto& [name, values] : samples[0].response_values) {
      padding.response_values[name] = at::empty({0}, values.options().device(at::kCPU));
    }
  }
  return fsdp::pack_micro_batch({padding}, {0});
}

// Samples are packed on the host and each micro-batch is then copied to the model's device at
// once (no-op on the CPU).
fsdp::PackedMicroBatch pack_on(const at::Device& device,
                               const std::vector<fsdp::PackingSample>& samples,
                               const std::vector<int64_t>& indices) {
  fsdp::PackedMicroBatch batch =
      indices.empty() ? padding_micro_batch(samples) : fsdp::pack_micro_batch(samples, indices);
  if (batch.tokens.device() == device) return batch;
  batch.tokens = batch.tokens.to(device);
  batch.position_ids = batch.position_ids.to(device);
  batch.cu_seqlens = batch.cu_seqlens.to(device);
  batch.loss_mask = batch.loss_mask.to(device);
  for (auto& [name, values] : batch.token_values) values = values.to(device);
  return batch;
}

comm::Communicator* group_of(fsdp::FsdpTransformer& model) {
  fsdp::FullyShardedModule& sharded = model.sharded();
  return sharded.world_size() > 1 ? sharded.communicator().get() : nullptr;
}

// The samples a rank is given are its data-parallel group's (split_across_ranks deals the same
// share to the CP ranks of a group), and the micro-batch layout follows from the packing options:
// the model's CP size and the options' must agree, or ranks would plan different steps.
void check_context_parallel_size(fsdp::FsdpTransformer& model,
                                 const fsdp::PackingOptions& options) {
  if (options.context_parallel_size != model.cp_size()) {
    throw Error("the packing options say context_parallel_size = " +
                std::to_string(options.context_parallel_size) + " but the model was built with " +
                std::to_string(model.cp_size()) +
                "; pass the trainer's --context-parallel-size to both");
  }
}

// The JSD term compares distributions over the vocabulary at the response tokens: the teacher
// must be there, and the rows are a micro-batch's own, which context parallelism would split over
// ranks.
void check_vocabulary_distillation(fsdp::FsdpTransformer& model, const TrainStepOptions& options,
                                   const DistillationTeacher& teacher) {
  const std::string flags =
      options.opd.self_distills() ? "--opd-type self" : "--opd-type trainer --opd-full-vocab";
  if (teacher.model == nullptr) {
    throw Error(flags + ": the training step was given no teacher (" +
                (options.opd.self_distills() ? "the reference model" : "the teacher model") + ")");
  }
  if (options.loss_type != LossType::kPolicyLoss) {
    throw Error(flags + " adds to the policy loss: --loss-type must be policy_loss");
  }
  if (model.cp_size() > 1) {
    throw Error(flags + " does not run with --context-parallel-size " +
                std::to_string(model.cp_size()) + " yet: use 1");
  }
}

// Steps 1-2: this rank's micro-batches. Each forward and backward is a sequence of
// collectives, so every rank runs as many micro-batches as the busiest rank needs; a rank with
// fewer samples runs empty ones. A rank with malformed samples must not leave the others waiting
// in a collective either: every rank checks its samples first, and the ranks agree on the
// outcome before any forward.
std::vector<std::vector<int64_t>> plan_micro_batches(
    fsdp::FsdpTransformer& model, const std::vector<fsdp::PackingSample>& samples,
    const fsdp::PackingOptions& options) {
  std::vector<int64_t> mine(samples.size());
  std::iota(mine.begin(), mine.end(), int64_t{0});
  std::vector<int64_t> lengths;
  int64_t needed = 0;
  std::string problem;
  try {
    fsdp::check_samples(samples);
    lengths = fsdp::sample_lengths(samples);
    needed = fsdp::count_micro_batches(lengths, mine, options);
  } catch (const Error& error) {
    problem = error.what();
  }
  at::Tensor agreed = at::tensor({needed, problem.empty() ? int64_t{0} : int64_t{1}}, at::kLong);
  if (comm::Communicator* group = group_of(model)) group->all_reduce(agreed, comm::ReduceOp::MAX);
  if (!problem.empty()) throw Error(problem);
  if (agreed[1].item<int64_t>() != 0) {
    throw Error("another rank of group '" + model.sharded().communicator()->name() +
                "' was given malformed samples (its error names them); no rank trained");
  }
  const int64_t count = agreed[0].item<int64_t>();
  if (count == 0) throw Error("no rank of the group was given any sample");
  return fsdp::split_into_micro_batches(lengths, mine, count, options);
}

// Step 3: the model's outputs for every packed token of the micro-batch, computed by `head`
// from the hidden states and the next tokens they predict.
//
// Under context parallelism each rank runs the model on its share of the micro-batch, with next
// tokens taken from the whole micro-batch before it is split; the outputs are then gathered over
// the CP group, so every rank of the group goes on with the whole micro-batch's outputs, as with
// CP = 1.
using Head =
    std::function<std::vector<at::Tensor>(const at::Tensor& hidden, const at::Tensor& next_tokens)>;

std::vector<at::Tensor> run_model(fsdp::FsdpTransformer& model, const fsdp::PackedMicroBatch& batch,
                                  const Head& head) {
  const at::Tensor next_tokens = at::roll(batch.tokens, -1);
  if (model.cp_size() == 1) {
    return head(model.forward(batch.tokens, batch.position_ids, batch.cu_seqlens), next_tokens);
  }
  const auto split =
      std::make_shared<const models::ContextParallelSplit>(models::split_for_context_parallel(
          models::sequence_offsets(batch.cu_seqlens, batch.num_tokens()), model.cp_size(),
          model.cp_rank()));
  at::Tensor hidden = model.forward_context_parallel(split->shard(batch.tokens),
                                                     split->shard(batch.position_ids), split);
  std::vector<at::Tensor> outputs = head(hidden, split->shard(next_tokens));
  for (at::Tensor& output : outputs) {
    output = fsdp::gather_context_parallel(output, *split, model.cp_group());
  }
  return outputs;
}

// The model predicts token t from position t - 1: each output moves to the token it is about, 0
// on each sample's first token (nothing predicts it).
at::Tensor align_to_predicted_tokens(const fsdp::PackedMicroBatch& batch,
                                     const at::Tensor& outputs) {
  return at::where(batch.position_ids == 0, at::zeros_like(outputs), at::roll(outputs, 1));
}

// Self-distillation compares whole distributions at the response tokens: the packed rows whose
// hidden states predict them (row t - 1 predicts token t), in packed order. A student's and a
// teacher's micro-batch of the same samples differ only in their prompts, so their rows come in
// the same number and order.
at::Tensor response_prediction_rows(const fsdp::PackedMicroBatch& batch) {
  const at::Tensor ends = batch.cu_seqlens.to(at::kCPU, at::kLong);
  std::vector<int64_t> rows;
  for (int64_t b = 0; b < batch.num_samples(); ++b) {
    const int64_t end = ends[b + 1].item<int64_t>();
    for (int64_t t = end - batch.response_lengths[b]; t < end; ++t) rows.push_back(t - 1);
  }
  return at::tensor(rows, at::kLong).to(batch.tokens.device());
}

// log softmax(hidden[rows] @ head^T / temperature) over the whole vocabulary, fp32 [N, V].
at::Tensor vocabulary_log_probs(fsdp::FsdpTransformer& model, const at::Tensor& hidden,
                                const at::Tensor& rows, double temperature) {
  const at::Tensor logits =
      at::matmul(hidden.index_select(0, rows), model.lm_head_weight().t()).to(at::kFloat);
  return models::log_softmax_fp64_sum(logits / temperature);
}

// The head runs over the vocabulary a chunk of tokens at a time (models/log_probs.h), in
// chunks of about 32M logits (128 MB in fp32): with Qwen3's 151,936-token vocabulary that is
// 220 tokens at once, where a fixed 1024 would hold [1024, V] logits (620 MB) and as much again
// for their softmax, more than the rest of a small model's activations.
int64_t log_prob_chunk_tokens(int64_t vocab_size) {
  return std::max<int64_t>(64, (int64_t{1} << 25) / std::max<int64_t>(vocab_size, 1));
}

// log p(token t | the earlier tokens of its sample) for every packed token; with
// `vocabulary_rows` also the vocabulary_log_probs at those rows, from the same forward.
struct PredictedTokens {
  models::TokenLogProbs tokens;
  at::Tensor vocabulary;  // [N, V], when vocabulary_rows is given
};

PredictedTokens predict_tokens(fsdp::FsdpTransformer& model, const fsdp::PackedMicroBatch& batch,
                               double temperature, bool with_entropy,
                               const at::Tensor& vocabulary_rows = {}) {
  const std::vector<at::Tensor> outputs =
      run_model(model, batch, [&](const at::Tensor& hidden, const at::Tensor& next_tokens) {
        const at::Tensor head = model.lm_head_weight();
        models::TokenLogProbs predicted =
            models::compute_token_log_probs(hidden, head, next_tokens, temperature,
                                            log_prob_chunk_tokens(head.size(0)), with_entropy);
        std::vector<at::Tensor> out{predicted.log_probs};
        if (with_entropy) out.push_back(predicted.entropy);
        if (vocabulary_rows.defined()) {
          // Not per token: run_model must not gather it (callers refuse context parallelism).
          out.push_back(vocabulary_log_probs(model, hidden, vocabulary_rows, temperature));
        }
        return out;
      });
  PredictedTokens aligned;
  aligned.tokens.log_probs = align_to_predicted_tokens(batch, outputs[0]);
  if (with_entropy) aligned.tokens.entropy = align_to_predicted_tokens(batch, outputs[1]);
  if (vocabulary_rows.defined()) aligned.vocabulary = outputs.back();
  return aligned;
}

models::TokenLogProbs token_log_probs(fsdp::FsdpTransformer& model,
                                      const fsdp::PackedMicroBatch& batch, double temperature,
                                      bool with_entropy) {
  return predict_tokens(model, batch, temperature, with_entropy).tokens;
}

// The teacher's side of the JSD term for one micro-batch, without gradients: its vocabulary
// log-probs at the response tokens [N, V]. A self-distilling teacher reads each sample after its
// teacher_prompt (the prompt with the privileged information) instead of its prompt; any other
// reads the sample as the student does. A rank without samples still runs the teacher (its
// forward is a collective) on a padding micro-batch, which has no response token.
at::Tensor teacher_vocabulary_log_probs(const DistillationTeacher& teacher,
                                        const std::vector<fsdp::PackingSample>& samples,
                                        const std::vector<int64_t>& indices,
                                        const TrainStepOptions& options) {
  std::vector<fsdp::PackingSample> shown;
  for (int64_t index : indices) {
    const fsdp::PackingSample& sample = samples[index];
    fsdp::PackingSample read;
    read.tokens = sample.tokens.to(at::kLong);
    read.response_length = sample.response_length;
    if (options.opd.self_distills()) {
      if (!sample.teacher_prompt.defined()) {
        throw Error("self-distillation: sample " + std::to_string(index) +
                    " has no teacher_prompt (the prompt with the privileged information)");
      }
      read.tokens = at::cat(
          {sample.teacher_prompt.to(at::kLong), read.tokens.slice(0, sample.prompt_length())});
    }
    shown.push_back(std::move(read));
  }
  std::vector<int64_t> all(shown.size());
  std::iota(all.begin(), all.end(), int64_t{0});
  fsdp::FsdpTransformer& model = *teacher.model;
  const fsdp::PackedMicroBatch batch = pack_on(device_of(model), shown, all);
  at::NoGradGuard no_grad;
  std::optional<models::AdaptersDisabled> base;
  if (teacher.adapters_off) base.emplace(*model.model());
  at::Tensor log_probs;
  try {
    const at::Tensor hidden = model.forward(batch.tokens, batch.position_ids, batch.cu_seqlens);
    log_probs =
        vocabulary_log_probs(model, hidden, response_prediction_rows(batch), options.temperature);
  } catch (...) {
    model.reshard();
    throw;
  }
  model.reshard();
  return log_probs;
}

// A critic's value of every packed token, fp32: the value head on the state it was sampled from.
at::Tensor token_values(fsdp::FsdpTransformer& model, const fsdp::PackedMicroBatch& batch) {
  const std::vector<at::Tensor> outputs =
      run_model(model, batch, [&](const at::Tensor& hidden, const at::Tensor&) {
        return std::vector<at::Tensor>{
            at::matmul(hidden, model.value_head_weight().t()).squeeze(-1).to(at::kFloat)};
      });
  return align_to_predicted_tokens(batch, outputs[0]);
}

// The step's value of every metric on every rank: sums add up, maxima and minima combine. The
// ranks of a CP group computed the same losses of the same micro-batches: only the first one's
// sums count.
std::map<std::string, double> reduce_over_ranks(fsdp::FsdpTransformer& model,
                                                const LossMetrics& metrics) {
  std::vector<double> sums, extremes;  // maxima, and minima negated
  const bool counts_sums = model.cp_rank() == 0;
  for (const auto& [name, entry] : metrics.entries()) {
    if (entry.reduction == LossMetrics::Reduction::kSum) {
      sums.push_back(counts_sums ? entry.value : 0.0);
    }
    if (entry.reduction == LossMetrics::Reduction::kMax) extremes.push_back(entry.value);
    if (entry.reduction == LossMetrics::Reduction::kMin) extremes.push_back(-entry.value);
  }
  at::Tensor sum_tensor = at::tensor(sums, at::kDouble);
  at::Tensor extreme_tensor = at::tensor(extremes, at::kDouble);
  if (comm::Communicator* group = group_of(model)) {
    if (!sums.empty()) group->all_reduce(sum_tensor, comm::ReduceOp::SUM);
    if (!extremes.empty()) group->all_reduce(extreme_tensor, comm::ReduceOp::MAX);
  }
  std::map<std::string, double> reduced;
  int64_t s = 0, e = 0;
  for (const auto& [name, entry] : metrics.entries()) {
    switch (entry.reduction) {
      case LossMetrics::Reduction::kSum:
        reduced[name] = sum_tensor[s++].item<double>();
        break;
      case LossMetrics::Reduction::kMax:
        reduced[name] = extreme_tensor[e++].item<double>();
        break;
      case LossMetrics::Reduction::kMin:
        reduced[name] = -extreme_tensor[e++].item<double>();
        break;
    }
  }
  return reduced;
}

algorithms::LossOutput sft_loss_of(fsdp::FsdpTransformer& model,
                                   const fsdp::PackedMicroBatch& batch,
                                   const algorithms::LossScale& scale) {
  const models::TokenLogProbs predicted =
      token_log_probs(model, batch, /*temperature=*/1.0, /*with_entropy=*/false);
  return algorithms::sft_loss({batch.cu_seqlens, batch.loss_mask, predicted.log_probs, {}}, scale);
}

// The per-token values come with the samples; only those the options use are looked up, so a
// missing one is named (PackedMicroBatch::value) and an unused one costs nothing. A rank without
// samples trains on a padding micro-batch that counts nothing: its values are zeros.
algorithms::LossOutput policy_loss_of(fsdp::FsdpTransformer& model,
                                      const fsdp::PackedMicroBatch& batch, bool rank_has_samples,
                                      const TrainStepOptions& options,
                                      const algorithms::LossScale& scale,
                                      const at::Tensor& teacher_log_probs) {
  const algorithms::PolicyLossOptions& policy = options.policy_loss;
  // Entropy is always reported (train/entropy_loss); it carries a gradient only when the loss
  // has an entropy term.
  const at::Tensor rows =
      teacher_log_probs.defined() ? response_prediction_rows(batch) : at::Tensor();
  const PredictedTokens outputs =
      predict_tokens(model, batch, options.temperature, /*with_entropy=*/true, rows);
  const models::TokenLogProbs& predicted = outputs.tokens;
  auto value = [&](const std::string& name) {
    return rank_has_samples ? batch.value(name) : at::zeros_like(predicted.log_probs);
  };
  algorithms::PolicyLossInputs inputs;
  inputs.cu_seqlens = batch.cu_seqlens;
  inputs.loss_mask = batch.loss_mask;
  inputs.log_probs = predicted.log_probs;
  inputs.entropy = policy.entropy_coef != 0 ? predicted.entropy : predicted.entropy.detach();
  inputs.old_log_probs = value("old_log_probs");
  inputs.advantages = value("advantages");
  if (policy.use_kl_loss) inputs.ref_log_probs = value("ref_log_probs");
  if (policy.mismatch.needs_rollout_log_probs()) {
    inputs.rollout_log_probs = value("rollout_log_probs");
  }
  if (!options.custom_pg_loss_reducer_function_path.empty()) {
    inputs.pg_loss_reducer =
        custom_pg_loss_reducer(options.custom_pg_loss_reducer_function_path, batch, scale);
  }
  if (policy.mismatch.uses_custom_tis()) {
    inputs.custom_tis = custom_tis(policy.mismatch.custom_tis_function_path, batch);
  }
  algorithms::LossOutput out = algorithms::policy_loss(inputs, policy, scale);
  if (teacher_log_probs.defined()) {
    const algorithms::LossOutput distilled = algorithms::vocabulary_distillation_loss(
        {batch.cu_seqlens, batch.loss_mask, rows + 1, outputs.vocabulary, teacher_log_probs},
        options.opd, scale);
    out.loss = out.loss + distilled.loss;
    out.metrics.merge(distilled.metrics);
  }
  return out;
}

// The critic's clipped value loss against the returns, from each sample's "values" (at rollout
// time) and "returns".
algorithms::LossOutput value_loss_of(fsdp::FsdpTransformer& model,
                                     const fsdp::PackedMicroBatch& batch, bool rank_has_samples,
                                     const TrainStepOptions& options,
                                     const algorithms::LossScale& scale) {
  const at::Tensor values = token_values(model, batch);
  auto value = [&](const std::string& name) {
    return rank_has_samples ? batch.value(name) : at::zeros_like(values);
  };
  algorithms::ValueLossInputs inputs;
  inputs.cu_seqlens = batch.cu_seqlens;
  inputs.loss_mask = batch.loss_mask;
  inputs.values = values;
  inputs.old_values = value("values");
  inputs.returns = value("returns");
  return algorithms::value_loss(inputs, options.value_loss, scale);
}

// The user's Python loss sees what the policy loss does: the log-probs and entropy of every token,
// and the samples' values (python_loss.h).
algorithms::LossOutput custom_loss_of(fsdp::FsdpTransformer& model,
                                      const fsdp::PackedMicroBatch& batch, bool rank_has_samples,
                                      const TrainStepOptions& options,
                                      const algorithms::LossScale& scale) {
  models::TokenLogProbs predicted =
      token_log_probs(model, batch, options.temperature, /*with_entropy=*/true);
  // As Slime: the entropy's gradient is computed only when the loss is meant to use it.
  if (options.policy_loss.entropy_coef == 0) predicted.entropy = predicted.entropy.detach();
  const int64_t data_parallel_rank = model.sharded().rank() / model.cp_size();
  return custom_loss(options.custom_loss_function_path, batch, predicted, rank_has_samples, scale,
                     data_parallel_rank);
}

// `teacher_log_probs`: the JSD term's teacher side of the micro-batch, or undefined.
algorithms::LossOutput loss_of(fsdp::FsdpTransformer& model, const fsdp::PackedMicroBatch& batch,
                               bool rank_has_samples, const TrainStepOptions& options,
                               const algorithms::LossScale& scale,
                               const at::Tensor& teacher_log_probs) {
  switch (options.loss_type) {
    case LossType::kPolicyLoss:
      return policy_loss_of(model, batch, rank_has_samples, options, scale, teacher_log_probs);
    case LossType::kSftLoss:
      return sft_loss_of(model, batch, scale);
    case LossType::kValueLoss:
      return value_loss_of(model, batch, rank_has_samples, options, scale);
    case LossType::kCustomLoss:
      return custom_loss_of(model, batch, rank_has_samples, options, scale);
  }
  throw Error("unknown loss type");
}

// Scores this rank's samples without gradients, micro-batch by micro-batch: `score` gives the
// per-token outputs of a micro-batch, which come back per sample: outputs[k][i] is output k of
// sample i, [R_i] fp32 over its response tokens.
std::vector<std::vector<at::Tensor>> score_responses(
    fsdp::FsdpTransformer& model, const std::vector<fsdp::PackingSample>& samples,
    const fsdp::PackingOptions& packing, size_t num_outputs,
    const std::function<std::vector<at::Tensor>(const fsdp::PackedMicroBatch&)>& score) {
  check_context_parallel_size(model, packing);
  at::NoGradGuard no_grad;
  std::vector<std::vector<at::Tensor>> outputs(num_outputs,
                                               std::vector<at::Tensor>(samples.size()));
  const at::Device device = device_of(model);
  for (const std::vector<int64_t>& indices : plan_micro_batches(model, samples, packing)) {
    const fsdp::PackedMicroBatch batch = pack_on(device, samples, indices);
    std::vector<at::Tensor> scored;
    try {
      scored = score(batch);
    } catch (...) {
      model.reshard();  // nothing stays gathered for a forward that has no backward
      throw;
    }
    model.reshard();
    for (size_t k = 0; k < num_outputs; ++k) {
      const std::vector<at::Tensor> responses =
          fsdp::unpack_responses(batch, scored[k].to(at::kCPU, at::kFloat));
      for (size_t b = 0; b < indices.size(); ++b) outputs[k][indices[b]] = responses[b].clone();
    }
  }
  return outputs;
}

}  // namespace

std::string loss_type_name(LossType type) {
  switch (type) {
    case LossType::kPolicyLoss:
      return "policy_loss";
    case LossType::kSftLoss:
      return "sft_loss";
    case LossType::kValueLoss:
      return "value_loss";
    case LossType::kCustomLoss:
      return "custom_loss";
  }
  return "?";
}

namespace {

LossType parse_loss_type(const nlohmann::json& name) {
  for (LossType type :
       {LossType::kPolicyLoss, LossType::kSftLoss, LossType::kValueLoss, LossType::kCustomLoss}) {
    if (loss_type_name(type) == name.get<std::string>()) return type;
  }
  throw ConfigError("loss_type = " + name.dump() +
                    " is not policy_loss, sft_loss, value_loss or custom_loss");
}

}  // namespace

const OptionFields<TrainStepOptions>& TrainStepOptions::fields() {
  using O = TrainStepOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.include("packing", &O::packing, fsdp::PackingOptions::fields());
    f.section("loss");
    algorithms::add_loss_aggregation_field(f, &O::loss_aggregation);
    // The flag offers the policy's losses; the wire carries a critic's too.
    FieldSpec& loss_type = f.add_custom(
        "loss_type", FieldType::kEnum,
        [](const O& o) { return nlohmann::json(loss_type_name(o.loss_type)); },
        [](const nlohmann::json& value, O& o) { o.loss_type = parse_loss_type(value); },
        "What the trainer minimises: the RL policy loss (algorithm section), the supervised "
        "loss on response tokens, or your Python loss (--custom-loss-function-path).");
    loss_type.choices = {"policy_loss", "sft_loss", "custom_loss"};
    f.add("custom_loss_function_path", &O::custom_loss_function_path,
          "With --loss-type custom_loss: your loss, package.module.function or file.py:function, "
          "(args, batch, logits, sum_of_sample_mean) -> (loss, metrics) as Slime's; see "
          "docs/custom_loss.md.");
    f.add("custom_pg_loss_reducer_function_path", &O::custom_pg_loss_reducer_function_path,
          "With --loss-type policy_loss: your reducer of pg_loss, (total_lengths, "
          "response_lengths, loss_masks, calculate_per_token_loss) -> (per-token pg_loss -> sum) "
          "as Slime's, in place of --loss-aggregation for pg_loss only.");
    f.add_rule([](const O& o) {
      const bool custom = o.loss_type == LossType::kCustomLoss;
      if (custom && o.custom_loss_function_path.empty()) {
        throw ConfigError("--loss-type custom_loss needs --custom-loss-function-path");
      }
      if (!custom && !o.custom_loss_function_path.empty()) {
        throw ConfigError("--custom-loss-function-path " + o.custom_loss_function_path +
                          " is used with --loss-type custom_loss only: add it (or drop the path)");
      }
      if (o.loss_type != LossType::kPolicyLoss && !o.custom_pg_loss_reducer_function_path.empty()) {
        throw ConfigError("--custom-pg-loss-reducer-function-path " +
                          o.custom_pg_loss_reducer_function_path +
                          " reduces the built-in policy loss: it is used with --loss-type "
                          "policy_loss only");
      }
    });
    f.section("optimizer");
    f.add("clip_grad", &O::clip_grad,
          "Clip the global gradient norm to this; 0 turns clipping off. A non-finite norm skips "
          "the step either way.")
        .min(0);
    f.include("policy_loss", &O::policy_loss, algorithms::PolicyLossOptions::fields(),
              /*as_flags=*/false);
    f.include("value_loss", &O::value_loss, algorithms::ValueLossOptions::fields(),
              /*as_flags=*/false);
    f.add_internal("temperature", &O::temperature);
    f.include("opd", &O::opd, algorithms::OpdOptions::fields(), /*as_flags=*/false);
    return f;
  }();
  return fields;
}

fsdp::PackingSample language_modeling_sample(const std::vector<int64_t>& tokens) {
  if (tokens.size() < 2) {
    throw Error(
        "a training sequence needs at least 2 tokens (one to predict from, one to "
        "predict), got " +
        std::to_string(tokens.size()));
  }
  fsdp::PackingSample sample;
  sample.tokens = at::tensor(tokens, at::kLong);
  sample.response_length = static_cast<int64_t>(tokens.size()) - 1;
  return sample;
}

TrainStepResult accumulate_gradients(fsdp::FsdpTransformer& model,
                                     const std::vector<fsdp::PackingSample>& samples,
                                     const TrainStepOptions& options,
                                     const DistillationTeacher& teacher) {
  check_context_parallel_size(model, options.packing);
  const bool distills_vocabulary = options.opd.distills_vocabulary();
  if (distills_vocabulary) check_vocabulary_distillation(model, options, teacher);
  const std::vector<std::vector<int64_t>> micro_batches =
      plan_micro_batches(model, samples, options.packing);

  // The loss is normalised by the whole step's counts, over every rank (the C ranks of a CP group
  // hold the same samples: they are counted once). The ranks of a CP group each contribute a
  // part of the same micro-batch's gradient, which FSDP averages over all W = D x C ranks
  // (loss_aggregation.h).
  double loss_tokens = 0;
  for (const fsdp::PackingSample& sample : samples) {
    loss_tokens += sample.response_mask.defined() ? sample.response_mask.sum().item<double>()
                                                  : static_cast<double>(sample.response_length);
  }
  at::Tensor counts = at::tensor({loss_tokens, static_cast<double>(samples.size())}, at::kDouble);
  if (comm::Communicator* group = group_of(model)) group->all_reduce(counts, comm::ReduceOp::SUM);
  algorithms::LossScale scale;
  scale.aggregation = options.loss_aggregation;
  const int64_t cp_size = model.cp_size();
  scale.global_tokens = counts[0].item<double>() / static_cast<double>(cp_size);
  scale.global_sequences = counts[1].item<double>() / static_cast<double>(cp_size);
  scale.dp_size = model.sharded().world_size() / cp_size;
  scale.cp_size = cp_size;

  const at::Device device = device_of(model);
  LossMetrics metrics;
  for (const std::vector<int64_t>& indices : micro_batches) {
    const at::Tensor teacher_log_probs =
        distills_vocabulary ? teacher_vocabulary_log_probs(teacher, samples, indices, options)
                            : at::Tensor();
    const fsdp::PackedMicroBatch batch = pack_on(device, samples, indices);
    const algorithms::LossOutput loss =
        loss_of(model, batch, !samples.empty(), options, scale, teacher_log_probs);
    model.backward(loss.loss);
    metrics.merge(loss.metrics);
  }

  TrainStepResult out;
  out.metrics = reduce_over_ranks(model, metrics);
  out.samples = static_cast<int64_t>(scale.global_sequences);
  out.loss_tokens = static_cast<int64_t>(scale.global_tokens);
  out.micro_batches = static_cast<int64_t>(micro_batches.size());
  return out;
}

TrainStepResult train_step(fsdp::FsdpTransformer& model, fsdp::ShardedAdamW& optimizer, double lr,
                           const std::vector<fsdp::PackingSample>& samples,
                           const TrainStepOptions& options, const DistillationTeacher& teacher) {
  TrainStepResult out = accumulate_gradients(model, samples, options, teacher);
  const fsdp::OptimizerStepResult step =
      fsdp::clip_and_step(model.sharded(), optimizer, lr, options.clip_grad);
  out.grad_norm = step.grad_norm;
  out.lr = lr;
  out.skipped = step.skipped;
  return out;
}

ResponseLogProbs compute_log_probs(fsdp::FsdpTransformer& model,
                                   const std::vector<fsdp::PackingSample>& samples,
                                   const fsdp::PackingOptions& packing, double temperature,
                                   bool with_entropy) {
  std::vector<std::vector<at::Tensor>> scored = score_responses(
      model, samples, packing, with_entropy ? 2 : 1, [&](const fsdp::PackedMicroBatch& batch) {
        models::TokenLogProbs predicted = token_log_probs(model, batch, temperature, with_entropy);
        if (!with_entropy) return std::vector<at::Tensor>{predicted.log_probs};
        return std::vector<at::Tensor>{predicted.log_probs, predicted.entropy};
      });
  ResponseLogProbs out;
  out.log_probs = std::move(scored[0]);
  if (with_entropy) out.entropy = std::move(scored[1]);
  return out;
}

std::vector<at::Tensor> compute_values(fsdp::FsdpTransformer& model,
                                       const std::vector<fsdp::PackingSample>& samples,
                                       const fsdp::PackingOptions& packing) {
  return score_responses(model, samples, packing, 1,
                         [&](const fsdp::PackedMicroBatch& batch) {
                           return std::vector<at::Tensor>{token_values(model, batch)};
                         })
      .front();
}

}  // namespace ooze::trainer
