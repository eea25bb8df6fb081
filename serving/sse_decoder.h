// Server-sent events (text/event-stream) read from a byte stream that arrives in arbitrary
// pieces: the HTTP client feeds whatever the socket gave it and gets back the events those
// bytes completed, so a streamed generation can be relayed event by event.
//
//   SseDecoder decoder;
//   for (const SseEvent& event : decoder.feed(bytes)) handle(event.data);
//
// The rules are the WHATWG event-stream rules: lines end with LF, CRLF or CR; "data:" lines
// accumulate (joined with '\n'); "event:" and "id:" name the event; lines starting with ':'
// are comments; a blank line ends an event, which is dispatched only when it has data.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ooze::serving {

struct SseEvent {
  std::string event;  // the "event:" field; empty for the default ("message")
  std::string data;   // the "data:" lines, joined with '\n'
  std::string id;     // the "id:" field
};

// The wire form of one event: "event: E\n" and "id: I\n" when set, one "data: " line per
// line of data, and the blank line that ends it.
std::string encode_sse_event(const SseEvent& event);

class SseDecoder {
 public:
  // Consumes the bytes; returns the events they completed, in order.
  std::vector<SseEvent> feed(std::string_view bytes);

 private:
  void end_of_line(std::vector<SseEvent>& events);

  std::string line_;
  bool last_was_cr_ = false;  // a CR ended the last line: an LF right after it is the same end
  SseEvent pending_;
  bool pending_has_data_ = false;
};

}  // namespace ooze::serving
