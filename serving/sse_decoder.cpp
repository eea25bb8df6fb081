#include "serving/sse_decoder.h"

namespace ooze::serving {

std::string encode_sse_event(const SseEvent& event) {
  std::string out;
  if (!event.event.empty()) out += "event: " + event.event + "\n";
  if (!event.id.empty()) out += "id: " + event.id + "\n";
  size_t start = 0;
  while (true) {
    const size_t end = event.data.find('\n', start);
    out += "data: " + event.data.substr(start, end - start) + "\n";
    if (end == std::string::npos) break;
    start = end + 1;
  }
  out += "\n";
  return out;
}

std::vector<SseEvent> SseDecoder::feed(std::string_view bytes) {
  std::vector<SseEvent> events;
  for (const char c : bytes) {
    if (c == '\n' && last_was_cr_) {
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = c == '\r';
    if (c == '\n' || c == '\r') {
      end_of_line(events);
    } else {
      line_ += c;
    }
  }
  return events;
}

void SseDecoder::end_of_line(std::vector<SseEvent>& events) {
  std::string line;
  line.swap(line_);
  if (line.empty()) {
    if (pending_has_data_) events.push_back(std::move(pending_));
    pending_ = SseEvent{};
    pending_has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // a comment (servers send them to keep connections open)
  const size_t colon = line.find(':');
  const std::string field = line.substr(0, colon);
  std::string value;
  if (colon != std::string::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
  }
  if (field == "data") {
    if (pending_has_data_) pending_.data += '\n';
    pending_.data += value;
    pending_has_data_ = true;
  } else if (field == "event") {
    pending_.event = value;
  } else if (field == "id") {
    pending_.id = value;
  }
  // Other fields ("retry") mean nothing to a relay and are dropped, as the rules say.
}

}  // namespace ooze::serving
