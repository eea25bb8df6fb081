// What the built-in reward rules (builtin_rewards.h) need of a sample's label, and how they read
// a label that lists several answers.
//
// Every rule but random compares the response to a reference answer: the label (the dataset's
// --label-key value), or for gpqa also the metadata's correct_letter, correct_answer or
// answer_text. A sample without one scores 0 whatever it answers, so the prompt data and
// `ooze reward` refuse it rather than train on silent zeros (rollout/reward_label_check.h).
//
// A label that is a JSON list of strings (["Paris", "City of Light"]: multi-answer QA) holds
// every acceptable answer. The rule scores the response against each and keeps the best, as the
// SQuAD and TriviaQA graders take the maximum over their gold answers: f1 the highest F1; math,
// deepscaler and gpqa 1 when any answer matches; dapo the best score. Any other label, an
// interval such as "[0, 1]" or a list of numbers included, is one answer.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ooze::rollout {

// Whether rule `rm_type` (a built-in type, with or without the boxed_ prefix) compares the
// response to a reference answer: every type but random. False for anything else (remote_rm,
// an unknown name): ooze cannot tell what those read.
bool reward_type_needs_label(const std::string& rm_type);

// The acceptable answers a label holds: the non-blank items of a JSON list of strings (none for
// an empty list), else the label itself when it is not blank, else none.
std::vector<std::string> label_answers(const std::string& label);

// Whether a sample with this label and metadata gives rule `rm_type` something to compare
// with (always true for a rule that needs no label).
bool has_reference_answer(const std::string& rm_type, const std::string& label,
                          const nlohmann::json& metadata);

}  // namespace ooze::rollout
