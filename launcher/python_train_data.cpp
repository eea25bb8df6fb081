#include "launcher/python_train_data.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace ooze::launcher {
namespace {

using nlohmann::json;

// The train data's entries, read with errors that say where: "loss_masks"[3], and the rollout's
// sample when the entries are the rollout's samples.
class TrainData {
 public:
  TrainData(const json& data, const std::vector<std::vector<rollout::Sample>>& groups)
      : data_(data) {
    for (const auto& group : groups) {
      for (const rollout::Sample& sample : group) samples_.push_back(&sample);
    }
    if (!data_.is_object()) throw Error("the train data is a " + type_of(data_) + ", not a dict");
    count_ = list("tokens").size();
    if (count_ == 0) throw Error("\"tokens\" is empty: the train data has no sample");
    for (const char* key : {"response_lengths", "rewards", "loss_masks"}) list(key);
  }

  size_t size() const { return count_; }
  bool has(const char* key) const { return data_.contains(key); }
  // Entry i is the rollout's sample i: the converter kept the rollout's samples.
  const rollout::Sample* sample(size_t i) const {
    return samples_.size() == count_ ? samples_[i] : nullptr;
  }

  // `key`: a list of one entry per sample.
  const json& list(const char* key) const {
    if (!data_.contains(key)) throw Error("the train data has no \"" + std::string(key) + "\"");
    const json& value = data_.at(key);
    if (!value.is_array()) {
      throw Error("\"" + std::string(key) + "\" is a " + type_of(value) + ", not a list");
    }
    if (count_ != 0 && value.size() != count_) {
      throw Error("\"" + std::string(key) + "\" has " + std::to_string(value.size()) +
                  " entries for the " + std::to_string(count_) + " samples of \"tokens\"");
    }
    return value;
  }

  int64_t integer(const char* key, size_t i) const {
    const json& value = list(key)[i];
    if (!value.is_number_integer()) fail(key, i, "is " + value.dump() + ", not an int");
    return value.get<int64_t>();
  }

  double number(const char* key, size_t i) const {
    const json& value = list(key)[i];
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      fail(key, i, "is " + value.dump() + ", not a finite number");
    }
    return value.get<double>();
  }

  // Entry i of `key`: a list of `length` numbers (of any length when negative), each accepted by
  // `valid`, whose test `expected` names.
  template <class T, class Valid>
  std::vector<T> numbers(const char* key, size_t i, int64_t length, Valid valid,
                         const char* expected) const {
    const json& value = list(key)[i];
    if (!value.is_array()) fail(key, i, "is a " + type_of(value) + ", not a list");
    if (length >= 0 && static_cast<int64_t>(value.size()) != length) {
      fail(key, i,
           "has " + std::to_string(value.size()) + " entries for a response of " +
               std::to_string(length) + " tokens (\"response_lengths\"[" + std::to_string(i) +
               "])");
    }
    std::vector<T> out;
    out.reserve(value.size());
    for (size_t t = 0; t < value.size(); ++t) {
      if (!valid(value[t])) {
        fail(key, i,
             "has " + value[t].dump() + " at [" + std::to_string(t) + "]: expected " + expected);
      }
      out.push_back(value[t].is_boolean() ? T(value[t].get<bool>()) : value[t].get<T>());
    }
    return out;
  }

  [[noreturn]] void fail(const char* key, size_t i, const std::string& what) const {
    std::string where = "\"" + std::string(key) + "\"[" + std::to_string(i) + "]";
    if (const rollout::Sample* sample = this->sample(i)) {
      where += " (sample " + std::to_string(sample->index) + ", group " +
               std::to_string(sample->group_index) + ")";
    }
    throw Error(where + " " + what);
  }

 private:
  // The Python type the value came from.
  static std::string type_of(const json& value) {
    switch (value.type()) {
      case json::value_t::object:
        return "dict";
      case json::value_t::array:
        return "list";
      case json::value_t::string:
        return "str";
      case json::value_t::boolean:
        return "bool";
      case json::value_t::null:
        return "None";
      default:
        return "number";
    }
  }

  const json& data_;
  std::vector<const rollout::Sample*> samples_;
  size_t count_ = 0;
};

bool is_token(const json& value) { return value.is_number_integer() && value.get<int64_t>() >= 0; }
bool is_mask(const json& value) {
  return value.is_boolean() || (value.is_number() && (value == 0 || value == 1));
}
bool is_log_prob(const json& value) { return value.is_number(); }

// The batch's rollouts and groups: the rollout's when the entries are its samples, in groups of
// as many rollouts each (as advantages and --global-batch-size take them); else each entry is a
// rollout and a group of its own (the rewards are final: there is no group to normalise over).
void set_rollouts(RolloutBatch& batch, const TrainData& data,
                  const std::vector<std::vector<rollout::Sample>>& groups) {
  batch.rollout_sizes.assign(data.size(), 1);
  batch.group_size = 1;
  if (data.sample(0) == nullptr) return;
  const size_t per_group = rollout_sizes_of(groups[0]).size();
  std::vector<int64_t> sizes;
  for (const auto& group : groups) {
    const std::vector<int64_t> group_sizes = rollout_sizes_of(group);
    if (group_sizes.size() != per_group) return;
    sizes.insert(sizes.end(), group_sizes.begin(), group_sizes.end());
  }
  batch.rollout_sizes = std::move(sizes);
  batch.group_size = static_cast<int64_t>(per_group);
}

// Whether the converter trains the rollout's samples on their own tokens, so that the engines'
// log-probs still belong to them.
bool keeps_rollout_tokens(const TrainData& data, const std::vector<std::vector<int64_t>>& tokens,
                          const std::vector<int64_t>& response_lengths) {
  for (size_t i = 0; i < data.size(); ++i) {
    const rollout::Sample* sample = data.sample(i);
    if (sample == nullptr || sample->tokens != tokens[i] ||
        sample->response_length != response_lengths[i] ||
        static_cast<int64_t>(sample->rollout_log_probs.size()) != response_lengths[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace

RolloutBatch rollout_batch_from_train_data(const nlohmann::json& train_data,
                                           const std::vector<std::vector<rollout::Sample>>& groups,
                                           bool needs_rollout_log_probs) {
  const TrainData data(train_data, groups);
  std::vector<std::vector<int64_t>> tokens;
  std::vector<int64_t> response_lengths;
  for (size_t i = 0; i < data.size(); ++i) {
    tokens.push_back(data.numbers<int64_t>("tokens", i, -1, is_token, "a token id (an int >= 0)"));
    const int64_t response = data.integer("response_lengths", i);
    if (response < 0 || response >= static_cast<int64_t>(tokens[i].size())) {
      data.fail("response_lengths", i,
                "is " + std::to_string(response) + " for " + std::to_string(tokens[i].size()) +
                    " tokens: a response is at most the tokens after the first (a trained "
                    "sample keeps a prompt token)");
    }
    response_lengths.push_back(response);
  }
  const bool given_log_probs = data.has("rollout_log_probs");
  const bool samples_log_probs =
      !given_log_probs && keeps_rollout_tokens(data, tokens, response_lengths);
  if (!given_log_probs && !samples_log_probs && needs_rollout_log_probs) {
    throw Error(
        "the train data has no \"rollout_log_probs\", and its tokens are not the rollout's "
        "samples' (whose log-probs ooze would take): the run needs them (--use-tis, "
        "--get-mismatch-metrics or --use-rollout-logprobs)");
  }

  RolloutBatch batch;
  batch.rewards_are_final = true;
  set_rollouts(batch, data, groups);
  for (size_t i = 0; i < data.size(); ++i) {
    fsdp::PackingSample sample;
    sample.tokens = at::tensor(tokens[i], at::kLong);
    sample.response_length = response_lengths[i];
    sample.response_mask = at::tensor(
        data.numbers<float>("loss_masks", i, response_lengths[i], is_mask, "0 or 1"), at::kFloat);
    if (given_log_probs) {
      sample.response_values["rollout_log_probs"] = at::tensor(
          data.numbers<float>("rollout_log_probs", i, response_lengths[i], is_log_prob, "a number"),
          at::kFloat);
    } else if (samples_log_probs) {
      sample.response_values["rollout_log_probs"] =
          at::tensor(data.sample(i)->rollout_log_probs, at::kFloat);
    }
    // A distillation teacher's, given, or the sample's when these are its tokens.
    const rollout::Sample* rollout_sample = data.sample(i);
    if (data.has("teacher_log_probs")) {
      sample.response_values["teacher_log_probs"] = at::tensor(
          data.numbers<float>("teacher_log_probs", i, response_lengths[i], is_log_prob, "a number"),
          at::kFloat);
    } else if (rollout_sample != nullptr && rollout_sample->tokens == tokens[i] &&
               rollout_sample->response_length == response_lengths[i] &&
               !rollout_sample->teacher_log_probs.empty() &&
               static_cast<int64_t>(rollout_sample->teacher_log_probs.size()) ==
                   response_lengths[i]) {
      sample.response_values["teacher_log_probs"] =
          at::tensor(rollout_sample->teacher_log_probs, at::kFloat);
    }
    batch.samples.push_back(std::move(sample));
    batch.rewards.push_back(data.number("rewards", i));
  }
  return batch;
}

}  // namespace ooze::launcher
