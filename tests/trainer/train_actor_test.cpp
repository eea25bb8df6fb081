// TrainActors as a driver uses them: W FSDP ranks in worker processes (the `ooze` binary hosts
// them), trained, scored, put to sleep, checkpointed, and loaded by a group of another size.
#include "trainer/train_actor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "tests/support/expect_error.h"
#include "tests/trainer/train_actor_fixture.h"

namespace ooze::trainer {
namespace train_actor_test {

using actors::get_all;

class TrainActorTest : public TrainActorFixture {
 protected:
  // Every rank's log-probs of the same sequences (rank 0's are returned): each rank scores the
  // whole batch with the full weights, so all must agree exactly.
  static std::vector<std::vector<float>> score(const TrainerGroup& group,
                                               const Sequences& sequences) {
    auto per_rank = get_all(group.call_all(&TrainActor::compute_log_probs, batch_of(sequences),
                                           /*temperature=*/1.0, /*with_entropy=*/false));
    std::vector<std::vector<std::vector<float>>> values;
    for (const ResponseLogProbs& rank : per_rank) {
      values.emplace_back();
      for (const at::Tensor& sample : rank.log_probs) {
        values.back().emplace_back(sample.data_ptr<float>(),
                                   sample.data_ptr<float>() + sample.numel());
      }
    }
    for (size_t rank = 1; rank < values.size(); ++rank) {
      EXPECT_EQ(values[rank], values[0]) << "rank " << rank;
    }
    return values[0];
  }

  // The group's full weights, as save_hf writes them.
  static std::map<std::string, at::Tensor> weights(const TrainerGroup& group,
                                                   const std::string& name) {
    const std::string out = *dir_ + "/" + name;
    get_all(group.call_all(&TrainActor::save_hf, out));
    const ShardedSafetensors file = ShardedSafetensors::open(out);
    std::map<std::string, at::Tensor> tensors;
    for (const std::string& tensor : file.names()) tensors[tensor] = file.tensor(tensor).clone();
    return tensors;
  }
};

double max_difference(const std::vector<std::vector<float>>& a,
                      const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double most = 0;
  for (size_t s = 0; s < std::min(a.size(), b.size()); ++s) {
    EXPECT_EQ(a[s].size(), b[s].size()) << "sequence " << s;
    for (size_t t = 0; t < std::min(a[s].size(), b[s].size()); ++t) {
      most = std::max(most, std::abs(static_cast<double>(a[s][t]) - b[s][t]));
    }
  }
  return most;
}

TEST_F(TrainActorTest, TwoRanksCheckpointAndOneRankContinuesTheirRun) {
  auto pair = start_group(2, "pair");
  auto single = start_group(1, "single");
  // Sharding halves what each rank holds (parameters, gradients, AdamW moments).
  int64_t whole = get_all(single.call_all(&TrainActor::state_bytes))[0];
  for (int64_t half : get_all(pair.call_all(&TrainActor::state_bytes))) {
    EXPECT_NEAR(static_cast<double>(whole) / static_cast<double>(half), 2.0, 0.02);
  }

  const Sequences probe = batch(99);
  std::vector<std::vector<float>> initial = score(pair, probe);
  EXPECT_EQ(score(single, probe), initial);  // the same initial weights, sharded or not
  for (const auto& values : initial) {
    EXPECT_EQ(values.size() + 1, probe[&values - &initial[0]].size());
    for (float value : values) EXPECT_LT(value, 0.0f);
  }

  double first = train(pair, 0);
  double second = train(pair, 1);
  EXPECT_LT(second, first + 1.0);
  std::vector<std::vector<float>> trained = score(pair, probe);
  EXPECT_GT(max_difference(trained, initial), 1e-3);  // training moved the weights

  // Sleeping and waking (host offload on a GPU, a no-op here) keeps every number.
  get_all(pair.call_all(&TrainActor::sleep));
  get_all(pair.call_all(&TrainActor::wake_up));
  EXPECT_EQ(score(pair, probe), trained);

  std::string checkpoints = *dir_ + "/checkpoints";
  for (const fsdp::TrainingProgress& saved :
       get_all(pair.call_all(&TrainActor::save, checkpoints))) {
    EXPECT_EQ(saved.iteration, 2);
    EXPECT_EQ(saved.consumed_samples, 2 * kBatchSize);
  }

  // One rank loads the two ranks' shards: the same weights, so the same scores bit for bit.
  fsdp::TrainingProgress loaded = get_all(single.call_all(&TrainActor::load, checkpoints))[0];
  EXPECT_EQ(loaded.iteration, 2);
  EXPECT_EQ(loaded.consumed_samples, 2 * kBatchSize);
  EXPECT_EQ(score(single, probe), trained);

  // And the optimizer state came along: the next step matches the two-rank run's to fp32
  // rounding (sums over ranks are ordered differently).
  double pair_third = train(pair, 2);
  double single_third = train(single, 2);
  EXPECT_NEAR(single_third, pair_third, 1e-5);
  EXPECT_LT(max_difference(score(single, probe), score(pair, probe)), 1e-5);
  stop(pair);
  stop(single);
}

TEST_F(TrainActorTest, MistakesComeBackAsRemoteErrorsNamingThem) {
  actors::ActorGroupOptions options;
  options.actor.resources = {{"CPU", 1}};
  options.group_name = "uninitialised";
  auto group = TrainerGroup::spawn(1, options);
  try {
    group.call(0, &TrainActor::train_step, TrainBatch{}).get();
    ADD_FAILURE() << "train_step before init succeeded";
  } catch (const actors::RemoteError& error) {
    EXPECT_NE(std::string(error.what()).find("train_step before init"), std::string::npos)
        << error.what();
  }

  auto single = start_group(1, "no-checkpoint");
  std::string empty = testing::make_temp_dir("train-actor-empty");
  try {
    single.call(0, &TrainActor::load, empty).get();
    ADD_FAILURE() << "loading from a directory without checkpoints succeeded";
  } catch (const actors::RemoteError& error) {
    EXPECT_NE(std::string(error.what()).find(empty + " has no latest_checkpointed_iteration.txt"),
              std::string::npos)
        << error.what();
  }
  // The actor survived its caller's mistakes and still trains.
  EXPECT_TRUE(std::isfinite(train(single, 0)));
  stop(group);
  stop(single);
}

// A malformed sample on one rank fails every rank at once, before any collective of the step,
// instead of leaving the others waiting in one; nothing trained, so the group trains on after.
TEST_F(TrainActorTest, MalformedSamplesOnOneRankFailEveryRank) {
  auto pair = start_group(2, "malformed");
  const Sequences sequences = batch(0);
  TrainBatch bad = batch_of({sequences[0], sequences[1]});
  bad.samples[1].response_length = bad.samples[1].length();  // no prompt token left
  const TrainBatch good = batch_of({sequences[2], sequences[3]});
  auto futures = pair.call_each(&TrainActor::train_step,
                                [&](int rank) { return std::make_tuple(rank == 0 ? bad : good); });
  const std::vector<std::string> expected = {"sample 1", "another rank"};
  for (size_t rank = 0; rank < futures.size(); ++rank) {
    try {
      futures[rank].get(std::chrono::seconds(60));
      ADD_FAILURE() << "rank " << rank << " trained on a malformed batch";
    } catch (const actors::RemoteError& error) {
      EXPECT_NE(std::string(error.what()).find(expected[rank]), std::string::npos) << error.what();
    }
  }
  EXPECT_TRUE(std::isfinite(train(pair, 1)));
  stop(pair);
}

// A rank whose share needs fewer micro-batches runs empty ones, so the ranks stay in step, and
// the step is the one a single rank takes on the whole batch.
TEST_F(TrainActorTest, UnevenSharesRunEmptyMicroBatchesAndMatchOneRank) {
  const TrainerOptions options = trainer_options({"--micro-batch-size", "1"});
  auto pair = start_group(2, "uneven", options);
  auto single = start_group(1, "uneven-single", options);
  const Sequences sequences = batch(0);
  TrainBatch three = batch_of({sequences[0], sequences[1], sequences[2]});
  TrainBatch one = batch_of({sequences[3]});
  auto results = get_all(pair.call_each(
      &TrainActor::train_step, [&](int rank) { return std::make_tuple(rank == 0 ? three : one); }));
  EXPECT_EQ(results[0].micro_batches, 3);
  EXPECT_EQ(results[1].micro_batches, 3);  // one sample, two empty micro-batches
  const double whole = train(single, sequences, options.step.packing);
  EXPECT_NEAR(results[0].metrics.at("loss"), whole, 1e-6);
  EXPECT_LT(max_difference(score(pair, batch(99)), score(single, batch(99))), 1e-5);
  stop(pair);
  stop(single);
}

// --max-tokens-per-gpu packing: two ranks, each planning its own micro-batches under the token
// budget, train as one rank does on the same global batches.
TEST_F(TrainActorTest, DynamicBatchingAtTwoRanksMatchesOneRank) {
  const TrainerOptions options = trainer_options(
      {"--use-dynamic-batch-size", "--max-tokens-per-gpu", "24", "--balance-data", "--lr", "1e-4"});
  auto pair = start_group(2, "dynamic-pair", options);
  auto single = start_group(1, "dynamic-single", options);
  for (int step = 0; step < 3; ++step) {
    const Sequences sequences = batch(step, /*size=*/8);
    const double two = train(pair, sequences, options.step.packing);
    const double one = train(single, sequences, options.step.packing);
    EXPECT_NEAR(two, one, 1e-6) << "step " << step;
  }
  const auto pair_weights = weights(pair, "dynamic-pair-model");
  const auto single_weights = weights(single, "dynamic-single-model");
  ASSERT_EQ(pair_weights.size(), single_weights.size());
  double most = 0;
  for (const auto& [name, tensor] : single_weights) {
    most = std::max(most, (pair_weights.at(name) - tensor).abs().max().item<double>());
  }
  std::printf("max |two ranks - one rank| over every weight after 3 steps: %.3g\n", most);
  // Two ranks sum the gradients in another order than one rank does: a couple of float32 ulps
  // at weights near 1 (how many shows depends on the CPU's BLAS kernels), far below what the
  // three steps moved them.
  const double bound = 2.5e-7;
  EXPECT_LE(most, bound);
  // And they trained: the weights moved from the initial model's.
  const ShardedSafetensors initial = ShardedSafetensors::open(*dir_ + "/model");
  double moved = 0;
  for (const auto& [name, tensor] : single_weights) {
    moved =
        std::max(moved, (initial.tensor(name).to(at::kFloat) - tensor).abs().max().item<double>());
  }
  EXPECT_GT(moved, 100 * bound);
  stop(pair);
  stop(single);
}

// RL samples: each sequence's last half is the response, every response token carries its
// sequence's advantage, and the old log-probs are `old_log_probs` (the trainer's own, or not).
TrainBatch policy_batch(const Sequences& sequences, const std::vector<float>& advantages,
                        const std::vector<at::Tensor>& old_log_probs = {}) {
  TrainBatch batch;
  for (size_t s = 0; s < sequences.size(); ++s) {
    fsdp::PackingSample sample;
    sample.tokens = at::tensor(sequences[s], at::kLong);
    sample.response_length = static_cast<int64_t>(sequences[s].size()) / 2;
    if (!old_log_probs.empty()) {
      sample.response_values["old_log_probs"] = old_log_probs[s];
      sample.response_values["advantages"] =
          at::full({sample.response_length}, advantages[s], at::kFloat);
    }
    batch.samples.push_back(sample);
  }
  return batch;
}

// The group's log-probs of `batch`'s responses, as the RL loop recomputes the old ones.
std::vector<at::Tensor> log_probs_of(const TrainerGroup& group, const TrainBatch& batch) {
  return log_probs(group, batch, {}, 1.0);
}

// With every advantage 1 and the old log-probs the policy's own (the ratio is exactly 1), the
// policy loss's gradient is the supervised loss's on the same response tokens: one step of each
// lands on the same weights. And before the first update Slime's invariants hold: ppo_kl and
// pg_clipfrac are exactly 0.
TEST_F(TrainActorTest, PolicyLossAtRatioOneStepsAsTheSupervisedLoss) {
  auto policy = start_group(1, "policy", trainer_options({"--loss-type", "policy_loss"}));
  auto supervised = start_group(1, "supervised", trainer_options({"--loss-type", "sft_loss"}));
  const Sequences sequences = batch(0);
  const std::vector<float> ones(sequences.size(), 1.0f);
  const TrainBatch rl =
      policy_batch(sequences, ones, log_probs_of(policy, policy_batch(sequences, ones)));

  const TrainStepResult step = train(policy, rl, {});
  EXPECT_EQ(step.metrics.at("ppo_kl"), 0.0);
  EXPECT_EQ(step.metrics.at("pg_clipfrac"), 0.0);
  EXPECT_NEAR(step.metrics.at("pg_loss"), -1.0, 1e-6);  // -ratio * advantage
  train(supervised, policy_batch(sequences, ones), {});

  const auto policy_weights = weights(policy, "policy-model");
  const auto supervised_weights = weights(supervised, "supervised-model");
  double most = 0;
  for (const auto& [name, tensor] : supervised_weights) {
    most = std::max(most, (policy_weights.at(name) - tensor).abs().max().item<double>());
  }
  EXPECT_LE(most, 1e-6) << "the policy step went elsewhere than the supervised one";
  stop(policy);
  stop(supervised);
}

// The policy loss with clipping at work (old log-probs off the policy's, advantages of both
// signs): two ranks take the steps one rank takes, also when one of them has no sample.
TEST_F(TrainActorTest, PolicyLossStepAtTwoRanksMatchesOneRank) {
  const TrainerOptions options = trainer_options({"--loss-type", "policy_loss"});
  auto pair = start_group(2, "policy-pair", options);
  auto single = start_group(1, "policy-single", options);
  const Sequences sequences = batch(0, /*size=*/8);
  std::vector<float> advantages;
  for (size_t s = 0; s < sequences.size(); ++s) advantages.push_back(s % 3 == 0 ? -1.0f : 0.5f);
  std::vector<at::Tensor> old = log_probs_of(single, policy_batch(sequences, advantages));
  torch::manual_seed(5);
  for (at::Tensor& values : old) values = values + 0.3 * torch::randn_like(values);
  const TrainBatch rl = policy_batch(sequences, advantages, old);

  const TrainStepResult two = train(pair, rl, options.step.packing);
  const TrainStepResult one = train(single, rl, options.step.packing);
  EXPECT_GT(one.metrics.at("pg_clipfrac"), 0.0) << "no token was clipped";
  EXPECT_NE(one.metrics.at("ppo_kl"), 0.0);
  for (const std::string key : {"loss", "pg_loss", "pg_clipfrac", "ppo_kl"}) {
    EXPECT_NEAR(two.metrics.at(key), one.metrics.at(key), 1e-6) << key;
  }
  // One sample, dealt to rank 0: rank 1 trains on padding that counts nothing.
  const TrainBatch lone = policy_batch({sequences[1]}, {advantages[1]}, {old[1]});
  const auto dealt = actors::get_all(pair.call_each(&TrainActor::train_step, [&](int rank) {
    return std::make_tuple(rank == 0 ? lone : TrainBatch{});
  }));
  EXPECT_NEAR(dealt[1].metrics.at("loss"),
              train(single, lone, options.step.packing).metrics.at("loss"), 1e-6);
  EXPECT_LT(max_difference(score(pair, batch(99)), score(single, batch(99))), 1e-5);
  stop(pair);
  stop(single);
}

// The reference model of KL-regularised RL: before the first update it scores exactly as the
// policy does (Slime's step-0 invariant), it stays the initial policy while the policy trains, and
// with --ref-load it is another checkpoint (here the trained policy's export).
TEST_F(TrainActorTest, TheReferenceModelIsTheInitialPolicyOrTheRefLoadCheckpoint) {
  TrainInit init;
  init.options = trainer_options();
  init.reference_model = true;
  auto pair = start_group(2, "with-reference", init);
  const TrainBatch probe = batch_of(batch(99));
  // Dealt over the ranks and put back in order, as the RL loop scores a rollout.
  auto reference_scores = [&](const TrainerGroup& group) {
    return log_probs(group, probe, {}, 1.0, Scorer::kReference);
  };
  auto policy_scores = [&](const TrainerGroup& group) { return log_probs(group, probe, {}, 1.0); };
  auto equal = [](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!at::equal(a[i], b[i])) return false;
    }
    return true;
  };
  const std::vector<at::Tensor> initial = policy_scores(pair);
  EXPECT_TRUE(equal(reference_scores(pair), initial)) << "step 0: reference != policy";
  // In the batch's order: rank 0 scoring the whole batch alone gives the same per sample.
  const auto whole =
      actors::get_all(pair.call_all(&TrainActor::compute_log_probs, probe, 1.0, false))[0];
  ASSERT_EQ(whole.log_probs.size(), initial.size());
  for (size_t i = 0; i < initial.size(); ++i) {
    ASSERT_EQ(whole.log_probs[i].numel(), initial[i].numel()) << "sample " << i;
    EXPECT_LT((whole.log_probs[i] - initial[i]).abs().max().item<double>(), 1e-5) << i;
  }

  train(pair, 0);
  train(pair, 1);
  EXPECT_FALSE(equal(policy_scores(pair), initial));
  EXPECT_TRUE(equal(reference_scores(pair), initial)) << "the reference moved with the policy";

  // --ref-load: the trained weights, exported, as another group's reference.
  const std::string trained = *dir_ + "/trained-for-reference";
  actors::get_all(pair.call_all(&TrainActor::save_hf, trained));
  init.ref_load = trained;
  auto single = start_group(1, "ref-load", init);
  const std::vector<at::Tensor> loaded = reference_scores(single);
  const std::vector<at::Tensor> expected = policy_scores(pair);
  ASSERT_EQ(loaded.size(), expected.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_LT((loaded[i] - expected[i]).abs().max().item<double>(), 1e-5) << "sample " << i;
  }
  EXPECT_TRUE(equal(policy_scores(single), initial)) << "--ref-load changed the policy";

  // A trainer without a reference says so.
  auto plain = start_group(1, "no-reference");
  const std::string message = testing::error_message_of<actors::RemoteError>(
      [&] { plain.call(0, &TrainActor::compute_ref_log_probs, probe, 1.0).get(); });
  EXPECT_CONTAINS(message, "holds no reference model");
  stop(pair);
  stop(single);
  stop(plain);
}

}  // namespace train_actor_test
}  // namespace ooze::trainer

namespace ooze::trainer {
namespace train_actor_test {

// LoRA (--lora-rank): the adapters are the only sharded, trained and checkpointed state; one and
// two ranks train the same adapter; the reference is the base with the adapters off; the adapter
// leaves as a PEFT directory that --lora-load starts from.
TEST_F(TrainActorTest, LoraTrainsOnlyTheAdapterAlikeAtOneAndTwoRanks) {
  const std::vector<std::string> lora_flags = {"--lora-rank", "4", "--lora-alpha", "8"};
  TrainInit init;
  init.options = trainer_options(lora_flags);
  init.reference_model = true;
  auto full = start_group(1, "lora-full");
  auto single = start_group(1, "lora-single", init);
  auto pair = start_group(2, "lora-pair", init);

  // A fresh adapter (B = 0) leaves the base exactly: the same log-probs as the full model.
  const Sequences probe = batch(99);
  const std::vector<std::vector<float>> initial = score(full, probe);
  EXPECT_EQ(score(single, probe), initial);
  EXPECT_EQ(score(pair, probe), initial);
  // The frozen base holds 4 bytes a parameter and nothing else; full training 16 (weights,
  // gradients, two AdamW moments).
  const int64_t full_bytes = get_all(full.call_all(&TrainActor::state_bytes))[0];
  const int64_t lora_bytes = get_all(single.call_all(&TrainActor::state_bytes))[0];
  EXPECT_LT(static_cast<double>(lora_bytes) / static_cast<double>(full_bytes), 0.4);
  stop(full);  // the runtime has 4 CPUs

  for (int step = 0; step < 3; ++step) {
    EXPECT_NEAR(train(single, step), train(pair, step), 1e-5) << "step " << step;
  }
  const std::vector<std::vector<float>> trained = score(pair, probe);
  EXPECT_GT(max_difference(trained, initial), 1e-3);
  EXPECT_LT(max_difference(score(single, probe), trained), 1e-5);
  // The reference model is the base: the adapters off, whatever they learned.
  for (const ResponseLogProbs& reference : get_all(pair.call_all(
           &TrainActor::compute_ref_log_probs, batch_of(probe), /*temperature=*/1.0))) {
    for (size_t s = 0; s < probe.size(); ++s) {
      EXPECT_TRUE(torch::equal(reference.log_probs[s], torch::tensor(initial[s], torch::kFloat)))
          << "sample " << s;
    }
  }

  // A checkpoint holds the adapter and its optimizer state only; one rank continues from two's.
  const std::string checkpoints = *dir_ + "/lora-checkpoints";
  get_all(pair.call_all(&TrainActor::save, checkpoints));
  uintmax_t checkpoint_bytes = 0;
  for (const auto& file : std::filesystem::recursive_directory_iterator(checkpoints)) {
    if (file.is_regular_file()) checkpoint_bytes += file.file_size();
  }
  EXPECT_LT(checkpoint_bytes * 4, static_cast<uintmax_t>(full_bytes));
  get_all(single.call_all(&TrainActor::load, checkpoints));
  EXPECT_EQ(score(single, probe), trained);
  stop(single);

  // save_hf writes a PEFT adapter directory; --lora-load starts a new group from it.
  const std::string adapter = *dir_ + "/lora-adapter";
  get_all(pair.call_all(&TrainActor::save_hf, adapter));
  const nlohmann::json config =
      nlohmann::json::parse(std::ifstream(adapter + "/adapter_config.json"));
  EXPECT_EQ(config.at("r"), 4);
  EXPECT_EQ(config.at("lora_alpha"), 8.0);
  EXPECT_EQ(config.at("base_model_name_or_path"), *dir_ + "/model");
  std::vector<std::string> load_flags = lora_flags;
  load_flags.insert(load_flags.end(), {"--lora-load", adapter});
  auto loaded = start_group(1, "lora-loaded", trainer_options(load_flags));
  EXPECT_EQ(score(loaded, probe), trained);
  stop(loaded);
  // An adapter of another rank does not fit, and says so.
  actors::ActorGroupOptions options;
  options.actor.resources = {{"CPU", 1}};
  options.group_name = "lora-wrong-rank";
  auto wrong = TrainerGroup::spawn(1, options);
  TrainInit wrong_rank;
  wrong_rank.model_dir = *dir_ + "/model";
  wrong_rank.group_name = options.group_name;
  wrong_rank.options =
      trainer_options({"--lora-rank", "2", "--lora-alpha", "4", "--lora-load", adapter});
  try {
    get_all(wrong.call_all(&TrainActor::init, wrong_rank));
    ADD_FAILURE() << "a rank-4 adapter loaded into rank-2 adapters";
  } catch (const actors::RemoteError& error) {
    EXPECT_NE(std::string(error.what()).find("has shape [4, 64], the model's is [2, 64]"),
              std::string::npos)
        << error.what();
  }
  stop(wrong);
  stop(pair);
}

// On-policy distillation in the trainer (--opd-type trainer): the teacher, loaded frozen and
// sharded from its HF directory, scores tokens exactly as the model that directory was saved
// from does; with --opd-full-vocab and no reward, the student's steps on its whole distributions
// bring the student's scores towards the teacher's.
TEST_F(TrainActorTest, ADistillationTeacherScoresAsTheModelItWasSavedFrom) {
  auto trained = start_group(1, "teacher-source");
  for (int step = 0; step < 2; ++step) train(trained, step);
  const std::string teacher_dir = *dir_ + "/teacher";
  get_all(trained.call_all(&TrainActor::save_hf, teacher_dir));
  const Sequences probe = batch(99);
  const std::vector<std::vector<float>> expected = score(trained, probe);
  stop(trained);

  TrainInit init;
  init.options = trainer_options({"--lr", "1e-3"});
  init.options.step.loss_type = LossType::kPolicyLoss;
  init.options.step.opd.use_opd = true;
  init.options.step.opd.full_vocab = true;
  init.teacher_load = teacher_dir;
  auto student = start_group(2, "student", init);
  for (const ResponseLogProbs& teacher : get_all(student.call_all(
           &TrainActor::compute_teacher_log_probs, batch_of(probe), /*temperature=*/1.0))) {
    ASSERT_EQ(teacher.log_probs.size(), probe.size());
    for (size_t s = 0; s < probe.size(); ++s) {
      EXPECT_TRUE(torch::equal(teacher.log_probs[s], torch::tensor(expected[s], torch::kFloat)))
          << "sample " << s;
    }
  }
  // The student itself is still the initial model.
  const double initial_gap = max_difference(score(student, probe), expected);
  EXPECT_GT(initial_gap, 1e-3);

  std::vector<double> jsd;
  for (int step = 0; step < 5; ++step) {
    TrainBatch distilled = batch_of(probe);
    const std::vector<std::vector<float>> old = score(student, probe);
    for (size_t s = 0; s < probe.size(); ++s) {
      fsdp::PackingSample& sample = distilled.samples[s];
      sample.response_values["old_log_probs"] = torch::tensor(old[s], torch::kFloat);
      sample.response_values["advantages"] = torch::zeros({sample.response_length});
    }
    jsd.push_back(train(student, distilled, init.options.step.packing).metrics.at("opd_jsd"));
  }
  EXPECT_LT(jsd.back(), 0.5 * jsd.front()) << "first " << jsd.front() << ", last " << jsd.back();
  EXPECT_LT(max_difference(score(student, probe), expected), 0.5 * initial_gap);
  stop(student);
}

}  // namespace train_actor_test
}  // namespace ooze::trainer
