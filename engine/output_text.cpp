#include "engine/output_text.h"

#include <algorithm>
#include <string_view>

#include "core/error.h"
#include "models/tokenizer.h"
#include "models/unicode_utils.h"

namespace ooze::engine {
namespace {

bool contains(const std::vector<int64_t>& ids, int64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// How many bytes at the end of `text` begin a UTF-8 character that later bytes could still
// complete (0 when the text ends on a whole character or on bytes no continuation can fix).
size_t incomplete_tail(std::string_view text) {
  // A character is at most 4 bytes: its first byte is among the last 3 if it is unfinished.
  const size_t lookback = std::min<size_t>(3, text.size());
  for (size_t back = 1; back <= lookback; ++back) {
    const size_t start = text.size() - back;
    const auto byte = static_cast<unsigned char>(text[start]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: the start is further back
    size_t needed = 0;
    if (byte >= 0xC2 && byte <= 0xDF) {
      needed = 2;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      needed = 3;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      needed = 4;
    }
    if (back >= needed) return 0;  // ASCII, an invalid byte, or a whole character
    // The bytes so far must be a valid start (E0 80 is not, and can never become one).
    char32_t code_point = 0;
    size_t length = 0;
    models::decode_utf8(text, start, &code_point, &length);
    return start + length == text.size() ? back : 0;
  }
  return 0;
}

}  // namespace

OutputText::OutputText(const models::Tokenizer& tokenizer, const SamplingParams& params,
                       std::vector<int64_t> eos_token_ids)
    : tokenizer_(tokenizer), params_(params), eos_token_ids_(std::move(eos_token_ids)) {
  for (const std::string& stop : params_.stop) longest_stop_ = std::max(longest_stop_, stop.size());
}

std::optional<StopMatch> OutputText::append(int64_t token_id) {
  if (stop_at_ || num_tokens_ >= params_.max_new_tokens) {
    throw Error("OutputText::append: the output already finished after " +
                std::to_string(num_tokens_) + " tokens; no token may follow");
  }
  ++num_tokens_;
  const size_t old_size = bytes_.size();
  bytes_ += tokenizer_.decode({token_id}, params_.skip_special_tokens);

  // A stop or EOS token ends the output and, as in SGLang, its own text is left out of it.
  if (contains(params_.stop_token_ids, token_id) ||
      (!params_.ignore_eos && contains(eos_token_ids_, token_id))) {
    stop_at_ = old_size;
    StopMatch match;
    match.matched_token = token_id;
    return match;
  }

  if (longest_stop_ > 0 && bytes_.size() > old_size) {
    // Only a match ending in the new bytes is new; it starts at most longest_stop_ - 1 before.
    const size_t from = old_size >= longest_stop_ - 1 ? old_size - (longest_stop_ - 1) : 0;
    std::optional<size_t> earliest;
    const std::string* matched = nullptr;
    for (const std::string& stop : params_.stop) {
      const size_t at = bytes_.find(stop, from);
      if (at != std::string::npos && (!earliest || at < *earliest)) {
        earliest = at;
        matched = &stop;
      }
    }
    if (earliest) {
      stop_at_ = earliest;
      StopMatch match;
      match.matched_stop = *matched;
      return match;
    }
  }

  if (num_tokens_ >= params_.max_new_tokens) {
    StopMatch match;
    match.reason = FinishReason::kLength;
    return match;
  }
  return std::nullopt;
}

std::string OutputText::text(bool finished) const {
  std::string_view text(bytes_);
  if (stop_at_) text = text.substr(0, *stop_at_);
  if (!finished) text.remove_suffix(incomplete_tail(text));
  // Bytes that can never form a character (a model may emit them) become U+FFFD. Held-back
  // bytes start at a character's first byte, so the replacements made now never change later.
  return models::utf8_lossy(text);
}

}  // namespace ooze::engine
