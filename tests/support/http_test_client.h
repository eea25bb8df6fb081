// A small blocking HTTP/1.1 client on Beast for the server tests: whole requests over a
// keep-alive connection, raw bytes for malformed input, and server-sent-event streams read
// event by event as they arrive.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ooze::testing {

namespace test_net = boost::asio;
namespace test_beast = boost::beast;
namespace test_http = boost::beast::http;

struct HttpReply {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // names lower-cased
  nlohmann::json json() const { return nlohmann::json::parse(body); }
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

using TestHeaders = std::vector<std::pair<std::string, std::string>>;

// Runs one asynchronous operation on `io` to completion: Beast's timeouts (expires_after) only
// apply to asynchronous operations. Returns its error code.
template <typename Start>
test_beast::error_code run_io(test_net::io_context& io, Start start) {
  test_beast::error_code result;
  start([&result](test_beast::error_code ec, auto&&...) { result = ec; });
  io.restart();
  io.run();
  return result;
}

inline void throw_if(test_beast::error_code ec) {
  if (ec) throw boost::system::system_error(ec);
}

// One connection, reused for every request (keep-alive). Throws boost::system::system_error on
// network errors and timeouts.
class TestHttpClient {
 public:
  explicit TestHttpClient(uint16_t port,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : stream_(io_), timeout_(timeout) {
    const test_net::ip::tcp::endpoint endpoint(test_net::ip::make_address("127.0.0.1"), port);
    stream_.expires_after(timeout_);
    throw_if(run_io(io_, [&](auto handler) { stream_.async_connect(endpoint, handler); }));
  }

  HttpReply request(const std::string& method, const std::string& target,
                    const std::string& body = "", const TestHeaders& headers = {}) {
    send(method, target, body, headers);
    test_http::response_parser<test_http::string_body> parser;
    parser.body_limit(1ull << 30);
    stream_.expires_after(timeout_);
    throw_if(run_io(
        io_, [&](auto handler) { test_http::async_read(stream_, buffer_, parser, handler); }));
    return to_reply(parser.get());
  }

  HttpReply post_json(const std::string& target, const nlohmann::json& body,
                      const TestHeaders& headers = {}) {
    return request("POST", target, body.dump(), headers);
  }

  // Sends a request whose response is an SSE stream; read it with next_event().
  void start_stream(const std::string& target, const nlohmann::json& body,
                    const TestHeaders& headers = {}) {
    send("POST", target, body.dump(), headers);
    stream_parser_.emplace();
    stream_parser_->body_limit(1ull << 30);
    events_text_.clear();
    stream_parser_->on_chunk_body(chunk_body_callback_);
    stream_.expires_after(timeout_);
    throw_if(run_io(io_, [&](auto handler) {
      test_http::async_read_header(stream_, buffer_, *stream_parser_, handler);
    }));
    stream_status_ = static_cast<int>(stream_parser_->get().result_int());
  }
  int stream_status() const { return stream_status_; }

  // The next event's data ("data: " removed, lines joined), or nullopt at the end of the stream.
  std::optional<std::string> next_event() {
    while (true) {
      const size_t end = events_text_.find("\n\n");
      if (end != std::string::npos) {
        std::string event = events_text_.substr(0, end);
        events_text_.erase(0, end + 2);
        std::string data;
        size_t begin = 0;
        while (begin <= event.size()) {
          size_t line_end = event.find('\n', begin);
          if (line_end == std::string::npos) line_end = event.size();
          const std::string line = event.substr(begin, line_end - begin);
          if (line.rfind("data: ", 0) == 0) data += (data.empty() ? "" : "\n") + line.substr(6);
          begin = line_end + 1;
        }
        return data;
      }
      if (stream_parser_->is_done()) return std::nullopt;
      stream_.expires_after(timeout_);
      throw_if(run_io(io_, [&](auto handler) {
        test_http::async_read_some(stream_, buffer_, *stream_parser_, handler);
      }));
    }
  }

  // Every remaining event's data, up to the end of the stream.
  std::vector<std::string> rest_of_stream() {
    std::vector<std::string> events;
    while (auto event = next_event()) events.push_back(*event);
    return events;
  }

  void close() {
    test_beast::error_code ignored;
    stream_.socket().shutdown(test_net::ip::tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

 private:
  void send(const std::string& method, const std::string& target, const std::string& body,
            const TestHeaders& headers) {
    test_http::request<test_http::string_body> request;
    request.method_string(method);
    request.target(target);
    request.version(11);
    request.set(test_http::field::host, "127.0.0.1");
    bool has_type = false;
    for (const auto& [name, value] : headers) {
      request.set(name, value);
      if (test_beast::iequals(name, "content-type")) has_type = true;
    }
    if (!body.empty() && !has_type) request.set(test_http::field::content_type, "application/json");
    request.body() = body;
    request.prepare_payload();
    stream_.expires_after(timeout_);
    throw_if(run_io(io_, [&](auto handler) { test_http::async_write(stream_, request, handler); }));
  }

  template <typename Response>
  static HttpReply to_reply(const Response& response) {
    HttpReply reply;
    reply.status = static_cast<int>(response.result_int());
    reply.body = response.body();
    for (const auto& field : response) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      reply.headers[name] = std::string(field.value());
    }
    return reply;
  }

  test_net::io_context io_;
  test_beast::tcp_stream stream_;
  std::chrono::milliseconds timeout_;
  test_beast::flat_buffer buffer_;
  std::optional<test_http::response_parser<test_http::empty_body>> stream_parser_;
  int stream_status_ = 0;
  std::string events_text_;
  std::function<size_t(std::uint64_t, test_beast::string_view, test_beast::error_code&)>
      chunk_body_callback_ =
          [this](std::uint64_t, test_beast::string_view body, test_beast::error_code&) {
            events_text_.append(body.data(), body.size());
            return body.size();
          };
};

// Sends raw bytes on a fresh connection and reads one response. status 0: the server closed
// the connection (or `wait` passed) without a complete response.
inline HttpReply raw_exchange(uint16_t port, const std::string& bytes,
                              std::chrono::milliseconds wait = std::chrono::seconds(5)) {
  test_net::io_context io;
  test_beast::tcp_stream stream(io);
  const test_net::ip::tcp::endpoint endpoint(test_net::ip::make_address("127.0.0.1"), port);
  stream.expires_after(wait);
  throw_if(run_io(io, [&](auto handler) { stream.async_connect(endpoint, handler); }));
  // A write error means the server closed early; its answer may still be readable.
  stream.expires_after(wait);
  run_io(io,
         [&](auto handler) { test_net::async_write(stream, test_net::buffer(bytes), handler); });
  HttpReply reply;
  test_beast::flat_buffer buffer;
  test_http::response_parser<test_http::string_body> parser;
  stream.expires_after(wait);
  if (run_io(io, [&](auto handler) { test_http::async_read(stream, buffer, parser, handler); })) {
    return reply;
  }
  reply.status = static_cast<int>(parser.get().result_int());
  reply.body = parser.get().body();
  return reply;
}

}  // namespace ooze::testing
