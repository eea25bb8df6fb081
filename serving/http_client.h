// A small HTTP/1.1 client (Boost.Beast over Boost.Asio) for talking to rollout engines: the
// router forwards requests with it and checks engines' health, and the RL loop can call an
// engine directly.
//
//   HttpClient client("http://127.0.0.1:30000");
//   HttpResponse response = client.send({"POST", "/generate", body.dump()});
//   client.send_streaming(request, [](const SseEvent& event) { relay(event); return true; });
//
// Every call blocks its own thread and is bounded by a timeout; calls from many threads run
// at once, each on its own connection. With keep_alive, a connection the server leaves open
// is kept for the next call (a kept connection the server has meanwhile closed is replaced
// by a fresh one, once, before any of the response arrived). Plain HTTP only: engines and
// their router run on one machine or one private network.
//
// Failures throw HttpError subclasses naming host:port, the request and the step that failed.
// An answer with any status (404, 500, ...) is a response, not an error.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "serving/sse_decoder.h"

namespace ooze::serving {

// A request that did not get a complete response. endpoint() is "host:port"; step() is what
// failed: "resolve", "connect", "send" or "read".
class HttpError : public Error {
 public:
  HttpError(std::string endpoint, std::string step, const std::string& message)
      : Error(message), endpoint_(std::move(endpoint)), step_(std::move(step)) {}
  const std::string& endpoint() const { return endpoint_; }
  const std::string& step() const { return step_; }

 private:
  std::string endpoint_;
  std::string step_;
};

// The server could not be reached, or the connection broke before the response was complete.
class HttpConnectionError : public HttpError {
 public:
  using HttpError::HttpError;
};

// The step did not finish within its timeout (the connection is closed).
class HttpTimeoutError : public HttpError {
 public:
  using HttpError::HttpError;
};

// "http://host:port" split into its parts. Throws ConfigError for anything else (https, a
// path, a missing or out-of-range port).
struct HttpUrl {
  std::string host;
  uint16_t port = 0;
  static HttpUrl parse(const std::string& url);
  std::string endpoint() const;   // "host:port" ("[::1]:port" for IPv6)
  std::string to_string() const;  // "http://host:port"
};

struct HttpRequest {
  std::string method = "GET";  // any HTTP method name: "GET", "POST", ...
  std::string target = "/";    // path and query
  std::string body;
  // Sent when the body is not empty.
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra fields (Authorization)
  // send(): the whole exchange. send_streaming(): sending, and then each wait for more of the
  // response (a stream may last as long as it keeps delivering).
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
};

struct HttpResponse {
  int status = 0;
  std::string content_type;  // the Content-Type field, as sent
  std::string body;          // empty for an event stream (its events went to the callback)
  std::vector<std::pair<std::string, std::string>> headers;  // every field, in order
  bool ok() const { return status >= 200 && status < 300; }
  bool is_event_stream() const;
  // The value of the first field with this name (any case); empty when there is none.
  std::string header(const std::string& name) const;
};

struct HttpClientOptions {
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
  bool keep_alive = true;            // reuse connections the server leaves open
  size_t max_idle_connections = 32;  // kept for reuse; more are closed
};

// Returns false to stop reading: the connection is then closed (a server notices the
// disconnect and can abort the work).
using SseEventHandler = std::function<bool(const SseEvent& event)>;

class HttpClient {
 public:
  // `url` is "http://host:port" (see HttpUrl). Connects lazily, on the first call.
  explicit HttpClient(const std::string& url, HttpClientOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  const HttpUrl& url() const { return url_; }

  // Sends the request and reads the whole response.
  HttpResponse send(const HttpRequest& request);

  // Sends the request (asking for text/event-stream) and, when the response is an event
  // stream, hands each event to on_event as soon as it has arrived; the returned response
  // then has the status and headers and an empty body. Any other response (an error status
  // with a JSON body, say) is returned whole and on_event is never called.
  HttpResponse send_streaming(const HttpRequest& request, const SseEventHandler& on_event);

 private:
  struct Connection;
  std::unique_ptr<Connection> take_connection(const HttpRequest& request, bool* reused);
  void keep_connection(std::unique_ptr<Connection> connection);
  HttpResponse exchange(const HttpRequest& request, const SseEventHandler* on_event);

  HttpUrl url_;
  HttpClientOptions options_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace ooze::serving
