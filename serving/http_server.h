// A small HTTP/1.1 server on Boost.Beast for the engine's endpoints and the router: a listener,
// keep-alive connections, request size limits, a bearer API-key check, JSON error bodies and
// server-sent-event (SSE) streams. It knows nothing about engines: every request that passes the
// checks is handed to one Handler as an HttpExchange, which the handler answers when it likes,
// from any thread.
//
//   HttpRoutes routes;
//   routes.add("GET", "/hello", [](std::shared_ptr<HttpExchange> ex) {
//     ex->respond(200, "text/plain", "hello\n");
//   });
//   routes.add("POST", "/stream", [](std::shared_ptr<HttpExchange> ex) {
//     ex->start_stream();
//     ex->on_close([] { /* client went away: stop producing */ });
//     std::thread([ex] {
//       for (int i = 0; i < 3 && ex->send_event("{\"i\":" + std::to_string(i) + "}"); ++i) {}
//       ex->send_event("[DONE]");
//       ex->finish();
//     }).detach();
//   });
//   ServerOptions options;  // 127.0.0.1, an ephemeral port
//   options.api_key = "secret";
//   HttpServer server(options, routes.handler());
//   server.url();  // "http://127.0.0.1:PORT"
//
// What the server does itself, before any handler runs:
//   * a request line or header it cannot parse: 400 (JSON error body), then closes;
//   * headers over max_header_bytes: 431; a body over max_body_bytes: 413; both then close;
//   * the API key: when ServerOptions::api_key is set, every request except GET on a
//     public path (/health by default) needs "Authorization: Bearer KEY", else 401;
//   * HttpRoutes answers 404 for an unknown path and 405 (with Allow) for a known path asked
//     with another method.
//
// One request per connection is in flight at a time (keep-alive, no pipelining in parallel);
// connections run on an io_context served by ServerOptions::threads threads. While a handler
// works (and while a stream is open) the server keeps reading the socket, so it notices a
// client that disconnected: send_event() starts returning false and on_close callbacks run, so
// the handler can abort its work (for the engine: Engine::abort frees the request's blocks).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace ooze::serving {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless asked; "0.0.0.0" or "::" for all
  uint16_t port = 0;               // 0: an ephemeral port, see HttpServer::port()
  int threads = 2;                 // threads running the io_context (parsing, writing)
  std::string api_key;             // empty: no authentication
  std::vector<std::string> public_paths = {"/health"};  // GET on these needs no API key
  size_t max_header_bytes = 64 * 1024;
  size_t max_body_bytes = 64 * 1024 * 1024;
  // A keep-alive connection with no request for this long is closed; a request whose headers
  // and body take longer than this to arrive is dropped.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
  // A client that does not take a response's (or stream's) bytes for this long is treated as
  // gone.
  std::chrono::milliseconds write_timeout{std::chrono::minutes(2)};
};

// Bind or listen failures (port taken, bad address).
class ServerError : public Error {
 public:
  using Error::Error;
};

class HttpConnection;  // internal: the socket behind an exchange

// One request and its response. Handlers get it as a shared_ptr and may keep it (and answer)
// after returning, from any thread. Exactly one of respond() / respond_error() / start_stream()
// takes effect; later calls are ignored. An exchange dropped without an answer gets a 500.
class HttpExchange : public std::enable_shared_from_this<HttpExchange> {
 public:
  // --- the request ---
  const std::string& method() const { return method_; }  // "GET", "POST", ...
  const std::string& target() const { return target_; }  // as sent: "/v1/models?x=1"
  const std::string& path() const { return path_; }      // target without the query: "/v1/models"
  const std::string& query() const { return query_; }    // after '?', undecoded; "" if none
  const HttpHeaders& headers() const { return headers_; }
  // The first header with this name (case-insensitive), or "" when absent.
  std::string header(std::string_view name) const;
  const std::string& body() const { return body_; }
  const std::string& remote_address() const { return remote_address_; }  // "127.0.0.1:53412"

  // --- a whole response ---
  // Content-Length is set from body; extra headers are added as given.
  void respond(int status, const std::string& content_type, std::string body,
               const HttpHeaders& extra_headers = {});
  // {"error": {"message": ..., "type": ..., "param": ... or null, "code": status}}, the
  // OpenAI error shape. type empty: "invalid_request_error" for 4xx, "server_error" for 5xx
  // ("authentication_error" for 401).
  void respond_error(int status, const std::string& message, const std::string& param = "",
                     const std::string& type = "");

  // --- a streamed response (chunked transfer encoding) ---
  // Sends the status and headers. Content type text/event-stream unless given otherwise.
  void start_stream(int status = 200, const std::string& content_type = "text/event-stream",
                    const HttpHeaders& extra_headers = {});
  // Queues one SSE event, "data: <data>\n\n" (a multi-line data gets a "data: " per line).
  // Starts the stream with the defaults if start_stream() was not called. Never blocks.
  // Returns false once the client has gone or the stream was finished (the data is dropped).
  bool send_event(const std::string& data);
  // Queues bytes as they are (the router relays an upstream stream this way). Same return.
  bool send_bytes(std::string bytes);
  // Ends the stream (the terminating chunk); the connection then serves its next request.
  void finish();

  // --- the client ---
  // True once the connection is known closed (disconnect, error, write timeout, shutdown)
  // before this exchange's response went out completely.
  bool client_gone() const;
  // Runs `callback` once if the client goes away before the response is fully written (not
  // after a completed response). Called on a server thread, or at once on the calling thread
  // when the client is already gone. Several callbacks may be registered.
  void on_close(std::function<void()> callback);

  ~HttpExchange();
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

 private:
  friend class HttpConnection;
  HttpExchange() = default;
  // Server side: the client left before the response was complete / the response is complete.
  void mark_gone();
  void mark_completed();
  // Both under mutex_.
  void start_stream_locked(int status, const std::string& content_type,
                           const HttpHeaders& extra_headers);
  bool queue_stream_bytes(std::string bytes);  // chunk-framed and queued

  std::string method_, target_, path_, query_, body_, remote_address_;
  HttpHeaders headers_;
  bool keep_alive_ = true;  // what the request asked for
  bool chunked_ = true;     // HTTP/1.1: streams use chunked encoding; HTTP/1.0: raw bytes, close
  std::shared_ptr<HttpConnection> connection_;

  mutable std::mutex mutex_;
  bool answered_ = false;  // a response or stream was started
  bool streaming_ = false;
  bool finished_ = false;   // nothing more may be queued
  bool completed_ = false;  // every byte written
  std::atomic<bool> gone_{false};
  std::vector<std::function<void()>> close_callbacks_;
};

// Called on a server thread for every request that passed the server's checks. It should return
// quickly (hand slow or blocking work to another thread) and answer through the exchange.
using HttpHandler = std::function<void(std::shared_ptr<HttpExchange>)>;

// Dispatch by exact method and path. Handlers that throw get a 500 (InvalidRequest-like
// errors are the handler's business: catch them and respond_error(400, ...)).
class HttpRoutes {
 public:
  void add(const std::string& method, const std::string& path, HttpHandler handler);
  // Called for paths no route names, instead of the 404 (the router forwards them).
  void set_fallback(HttpHandler handler) { fallback_ = std::move(handler); }
  void dispatch(const std::shared_ptr<HttpExchange>& exchange) const;
  // A handler for HttpServer that dispatches to these routes (copied: add routes first).
  HttpHandler handler() const;

 private:
  struct Route {
    std::string method, path;
    HttpHandler handler;
  };
  std::vector<Route> routes_;
  HttpHandler fallback_;
};

class HttpServer {
 public:
  // Binds, listens and starts the threads; throws ServerError when it cannot bind.
  HttpServer(ServerOptions options, HttpHandler handler);
  // stop() with no drain time.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;    // the bound port
  std::string url() const;  // "http://127.0.0.1:30000" (brackets around an IPv6 host)

  // Stops accepting, closes idle connections, gives requests in flight up to `drain` to
  // finish their responses, then closes every connection (their on_close callbacks run) and
  // joins the threads. Idempotent.
  void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(0));

  // Exchanges whose response has not been completely written yet.
  int64_t requests_in_flight() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ooze::serving
