#include "serving/http_server.h"

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdio>
#include <future>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/logging.h"

namespace ooze::serving {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

// Bytes read ahead while a response is pending (to notice a disconnect); a client that
// pipelines more than this is no longer watched until its response is done.
constexpr size_t kWatchLimit = 64 * 1024;
// After a response that closes the connection, unread request bytes are drained for this long
// so the close does not reset the connection before the client has read the response.
constexpr auto kLingerTime = std::chrono::seconds(2);

std::string status_line(int status) {
  const beast::string_view reason = http::obsolete_reason(static_cast<http::status>(status));
  return "HTTP/1.1 " + std::to_string(status) + " " +
         (reason.empty() ? std::string("Unknown") : std::string(reason)) + "\r\n";
}

// Header names and values may not carry CR or LF (a handler echoing user input must not be
// able to split the response).
std::string header_safe(const std::string& text) {
  std::string out = text;
  out.erase(std::remove_if(out.begin(), out.end(), [](char c) { return c == '\r' || c == '\n'; }),
            out.end());
  return out;
}

std::string format_head(int status, const std::string& content_type,
                        const HttpHeaders& extra_headers, bool keep_alive,
                        const std::string& framing) {
  std::string head = status_line(status);
  head += "Server: ooze\r\n";
  if (!content_type.empty()) head += "Content-Type: " + header_safe(content_type) + "\r\n";
  for (const auto& [name, value] : extra_headers) {
    head += header_safe(name) + ": " + header_safe(value) + "\r\n";
  }
  head += framing;
  head += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  head += "\r\n";
  return head;
}

std::string error_body(int status, const std::string& message, const std::string& param,
                       const std::string& type) {
  std::string error_type = type;
  if (error_type.empty()) {
    error_type = status == 401   ? "authentication_error"
                 : status >= 500 ? "server_error"
                                 : "invalid_request_error";
  }
  nlohmann::json error = {
      {"message", message},
      {"type", error_type},
      {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
      {"code", status}};
  // Replace rather than throw on invalid UTF-8 echoed from a request.
  return nlohmann::json{{"error", error}}.dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace);
}

std::string format_full_response(int status, const std::string& content_type,
                                 const std::string& body, const HttpHeaders& extra_headers,
                                 bool keep_alive) {
  return format_head(status, content_type, extra_headers, keep_alive,
                     "Content-Length: " + std::to_string(body.size()) + "\r\n") +
         body;
}

std::string chunk(const std::string& bytes) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", bytes.size());
  return size + bytes + "\r\n";
}

bool header_iequals(beast::string_view a, beast::string_view b) { return beast::iequals(a, b); }

// Equal-time comparison, so response timing does not reveal how much of a key matched.
bool same_secret(const std::string& given, const std::string& expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |=
        static_cast<unsigned char>(given[i] ^ expected[i % std::max<size_t>(1, expected.size())]);
  }
  return diff == 0;
}

}  // namespace

// What connections share with their server: options, the handler, the count of requests in
// flight, and whether posting to the io_context is still allowed (not after stop()).
struct ServerShared {
  ServerOptions options;
  HttpHandler handler;
  std::mutex mutex;  // guards running and connections
  bool running = true;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> in_flight{0};
  uint64_t next_connection_id = 0;
  std::unordered_map<uint64_t, std::weak_ptr<HttpConnection>> connections;
};

// One accepted socket. Every member is used on the connection's strand only, except post().
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(std::shared_ptr<net::io_context> io, std::shared_ptr<ServerShared> shared,
                 tcp::socket socket, uint64_t id)
      : io_(std::move(io)),
        shared_(std::move(shared)),
        socket_(std::move(socket)),
        strand_(socket_.get_executor()),
        read_timer_(strand_),
        write_timer_(strand_),
        id_(id) {
    beast::error_code ec;
    const tcp::endpoint remote = socket_.remote_endpoint(ec);
    if (!ec) {
      const std::string address = remote.address().to_string();
      remote_ = (remote.address().is_v6() ? "[" + address + "]" : address) + ":" +
                std::to_string(remote.port());
    }
  }

  void start() {
    post([self = shared_from_this()] { self->read_request(); });
  }

  // From any thread: runs fn on the strand, unless the server has stopped.
  void post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (!shared_->running) return;
    net::post(strand_, std::move(fn));
  }

  // --- strand only ---

  void write(std::string bytes, bool ends_response) {
    if (closed_ || !response_active_) return;
    pending_ += bytes;
    pending_ends_ = pending_ends_ || ends_response;
    if (!writing_) write_pending();
  }

  void close_after_response() { keep_alive_ = false; }

  void server_stopping() {
    if (!response_active_) close();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    read_timer_.cancel();
    write_timer_.cancel();
    if (response_active_) {
      response_active_ = false;
      if (exchange_counted_) {
        exchange_counted_ = false;
        shared_->in_flight.fetch_sub(1);
      }
      if (auto exchange = exchange_.lock()) exchange->mark_gone();
    }
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->connections.erase(id_);
  }

 private:
  const ServerOptions& options() const { return shared_->options; }

  void read_request() {
    if (closed_) return;
    if (shared_->stopping && buffer_.size() == 0) return close();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(
        std::min<size_t>(options().max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
    parser_->body_limit(options().max_body_bytes);
    reading_ = true;
    arm_read_timer();
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void arm_read_timer() {
    const uint64_t generation = ++read_generation_;
    read_timer_.expires_after(options().idle_timeout);
    read_timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
      if (!ec && self->reading_ && self->read_generation_ == generation) self->close();
    });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    const auto& request = parser_->get();
    if (request.version() != 10 && request.version() != 11) {
      reading_ = false;
      read_timer_.cancel();
      return reject(505, "only HTTP/1.0 and HTTP/1.1 are served");
    }
    const auto expect = request.find(http::field::expect);
    if (expect != request.end() && header_iequals(expect->value(), "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(socket_, net::buffer(kContinue),
                       [self = shared_from_this()](beast::error_code write_ec, size_t) {
                         if (write_ec) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    if (closed_) return;
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->on_read_error(ec);
                       self->on_request();
                     });
  }

  void on_read_error(beast::error_code ec) {
    reading_ = false;
    read_timer_.cancel();
    if (closed_) return;
    if (ec == http::error::body_limit) {
      return reject(413, "the request body is larger than the server's limit of " +
                             std::to_string(options().max_body_bytes) + " bytes");
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return reject(431, "the request headers are larger than the server's limit of " +
                             std::to_string(options().max_header_bytes) + " bytes");
    }
    // A clean close, a close mid-request, a reset or a timeout: nobody to answer.
    if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
        ec.category() != beast::error_code(http::error::end_of_stream).category()) {
      return close();
    }
    reject(400, "malformed HTTP request: " + ec.message());
  }

  // Answers a request the server could not parse or accept, then closes the connection.
  void reject(int status, const std::string& message) {
    response_active_ = true;
    keep_alive_ = false;
    write(format_full_response(status, "application/json", error_body(status, message, "", ""), {},
                               false),
          true);
  }

  void on_request() {
    reading_ = false;
    read_timer_.cancel();
    if (closed_) return;
    auto& request = parser_->get();
    std::shared_ptr<HttpExchange> exchange(new HttpExchange());
    exchange->method_ = std::string(request.method_string());
    exchange->target_ = std::string(request.target());
    const size_t question = exchange->target_.find('?');
    exchange->path_ = exchange->target_.substr(0, question);
    if (question != std::string::npos) exchange->query_ = exchange->target_.substr(question + 1);
    for (const auto& field : request) {
      exchange->headers_.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    exchange->body_ = std::move(request.body());
    exchange->remote_address_ = remote_;
    exchange->keep_alive_ = request.keep_alive();
    exchange->chunked_ = request.version() >= 11;
    exchange->connection_ = shared_from_this();
    parser_.reset();

    keep_alive_ = exchange->keep_alive_;
    response_active_ = true;
    exchange_counted_ = true;
    shared_->in_flight.fetch_add(1);
    exchange_ = exchange;
    watch_for_close();

    if (!authorized(*exchange)) {
      exchange->respond_error(401,
                              "missing or wrong API key: send the header "
                              "'Authorization: Bearer <key>' with the server's --api-key",
                              "", "authentication_error");
      return;
    }
    try {
      shared_->handler(exchange);
    } catch (const std::exception& e) {
      exchange->respond_error(500, std::string("internal error: ") + e.what());
    }
  }

  bool authorized(const HttpExchange& exchange) const {
    const std::string& key = options().api_key;
    if (key.empty()) return true;
    if (exchange.method() == "GET" &&
        std::find(options().public_paths.begin(), options().public_paths.end(), exchange.path()) !=
            options().public_paths.end()) {
      return true;
    }
    const std::string authorization = exchange.header("authorization");
    constexpr beast::string_view kBearer = "bearer ";
    if (authorization.size() < kBearer.size() ||
        !header_iequals(beast::string_view(authorization).substr(0, kBearer.size()), kBearer)) {
      return false;
    }
    std::string given = authorization.substr(kBearer.size());
    while (!given.empty() && given.front() == ' ') given.erase(given.begin());
    return same_secret(given, key);
  }

  // Keeps one read pending while the response is prepared and written: it fails when the
  // client closes, which is how a disconnect is noticed. Bytes it reads (a pipelined next
  // request) stay in buffer_ for the next parse.
  void watch_for_close() {
    if (watching_ || closed_ || buffer_.size() >= kWatchLimit) return;
    watching_ = true;
    socket_.async_read_some(
        buffer_.prepare(4096),
        [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_watch(ec, n); });
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (closed_) return;
    if (!ec) buffer_.commit(n);
    if (ec && ec != net::error::operation_aborted) return close();
    if (resume_after_watch_) {
      resume_after_watch_ = false;
      return read_request();
    }
    if (!ec && response_active_) watch_for_close();
  }

  void write_pending() {
    writing_ = true;
    in_write_.swap(pending_);
    pending_.clear();
    in_write_ends_ = pending_ends_;
    pending_ends_ = false;
    const uint64_t generation = ++write_generation_;
    write_timer_.expires_after(options().write_timeout);
    write_timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
      if (!ec && self->writing_ && self->write_generation_ == generation) self->close();
    });
    net::async_write(
        socket_, net::buffer(in_write_),
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
  }

  void on_write(beast::error_code ec) {
    writing_ = false;
    write_timer_.cancel();
    if (closed_) return;
    if (ec) return close();
    in_write_.clear();
    if (in_write_ends_) return on_response_written();
    if (!pending_.empty() || pending_ends_) write_pending();
  }

  void on_response_written() {
    response_active_ = false;
    if (exchange_counted_) {
      exchange_counted_ = false;
      shared_->in_flight.fetch_sub(1);
    }
    if (auto exchange = exchange_.lock()) exchange->mark_completed();
    exchange_.reset();
    if (!keep_alive_ || shared_->stopping) return linger_close();
    if (watching_) {
      resume_after_watch_ = true;
      beast::error_code ignored;
      socket_.cancel(ignored);
      return;
    }
    read_request();
  }

  // Half-closes, then drains what the client still sends (briefly), then closes: closing a
  // socket with unread input would reset the connection and could destroy the response.
  void linger_close() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    read_timer_.expires_after(kLingerTime);
    read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->close();
    });
    if (!watching_) drain();
  }

  void drain() {
    if (closed_) return;
    watching_ = true;
    buffer_.clear();
    socket_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->watching_ = false;
                              if (ec) return self->close();
                              self->drain();
                            });
  }

  std::shared_ptr<net::io_context> io_;  // first member: outlives the socket and timers
  std::shared_ptr<ServerShared> shared_;
  tcp::socket socket_;
  net::any_io_executor strand_;
  net::steady_timer read_timer_, write_timer_;
  uint64_t id_;
  std::string remote_;

  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool reading_ = false;
  uint64_t read_generation_ = 0, write_generation_ = 0;
  bool watching_ = false;
  bool resume_after_watch_ = false;

  std::weak_ptr<HttpExchange> exchange_;
  bool response_active_ = false;   // a request awaits or is writing its response
  bool exchange_counted_ = false;  // counted in shared_->in_flight
  bool keep_alive_ = true;
  bool closed_ = false;

  std::string pending_, in_write_;
  bool pending_ends_ = false, in_write_ends_ = false;
  bool writing_ = false;
};

// ---------------------------------------------------------------------------------------------
// HttpExchange

std::string HttpExchange::header(std::string_view name) const {
  for (const auto& [key, value] : headers_) {
    if (header_iequals(beast::string_view(key.data(), key.size()),
                       beast::string_view(name.data(), name.size()))) {
      return value;
    }
  }
  return "";
}

void HttpExchange::respond(int status, const std::string& content_type, std::string body,
                           const HttpHeaders& extra_headers) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (answered_ || !connection_) return;
  answered_ = true;
  finished_ = true;
  std::string bytes = format_full_response(status, content_type, body, extra_headers, keep_alive_);
  connection_->post([connection = connection_, bytes = std::move(bytes)]() mutable {
    connection->write(std::move(bytes), true);
  });
}

void HttpExchange::respond_error(int status, const std::string& message, const std::string& param,
                                 const std::string& type) {
  respond(status, "application/json", error_body(status, message, param, type));
}

void HttpExchange::start_stream(int status, const std::string& content_type,
                                const HttpHeaders& extra_headers) {
  std::lock_guard<std::mutex> lock(mutex_);
  start_stream_locked(status, content_type, extra_headers);
}

void HttpExchange::start_stream_locked(int status, const std::string& content_type,
                                       const HttpHeaders& extra_headers) {
  if (answered_ || !connection_) return;
  answered_ = true;
  streaming_ = true;
  HttpHeaders headers = extra_headers;
  headers.emplace_back("Cache-Control", "no-cache");
  headers.emplace_back("X-Accel-Buffering", "no");  // proxies must not hold events back
  std::string head = format_head(status, content_type, headers, keep_alive_ && chunked_,
                                 chunked_ ? "Transfer-Encoding: chunked\r\n" : "");
  const bool close_after = !chunked_;  // without chunks, the end of the body is the close
  connection_->post([connection = connection_, head = std::move(head), close_after]() mutable {
    if (close_after) connection->close_after_response();
    connection->write(std::move(head), false);
  });
}

bool HttpExchange::queue_stream_bytes(std::string bytes) {
  if (!streaming_ || finished_ || gone_) return false;
  if (bytes.empty()) return true;  // an empty chunk would end the stream
  std::string framed = chunked_ ? chunk(bytes) : std::move(bytes);
  connection_->post([connection = connection_, framed = std::move(framed)]() mutable {
    connection->write(std::move(framed), false);
  });
  return true;
}

bool HttpExchange::send_bytes(std::string bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!answered_) start_stream_locked(200, "text/event-stream", {});
  return queue_stream_bytes(std::move(bytes));
}

bool HttpExchange::send_event(const std::string& data) {
  std::string event;
  size_t begin = 0;
  while (true) {
    const size_t end = data.find('\n', begin);
    event += "data: " + data.substr(begin, end == std::string::npos ? end : end - begin) + "\n";
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  event += "\n";
  return send_bytes(std::move(event));
}

void HttpExchange::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!streaming_ || finished_) return;
  finished_ = true;
  if (gone_) return;
  connection_->post([connection = connection_, chunked = chunked_] {
    connection->write(chunked ? "0\r\n\r\n" : "", true);
  });
}

bool HttpExchange::client_gone() const { return gone_.load(); }

void HttpExchange::on_close(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return;
    if (!gone_) {
      close_callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

void HttpExchange::mark_gone() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_ || gone_) return;
    gone_ = true;
    callbacks.swap(close_callbacks_);
  }
  for (auto& callback : callbacks) {
    try {
      callback();
    } catch (const std::exception& e) {
      OOZE_LOG(WARN) << "http: an on_close callback threw: " << e.what();
    }
  }
}

void HttpExchange::mark_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  completed_ = true;
  close_callbacks_.clear();
}

HttpExchange::~HttpExchange() {
  // No lock needed: nobody else holds this exchange any more.
  if (!connection_) return;
  if (!answered_) {
    std::string bytes = format_full_response(
        500, "application/json",
        error_body(500, "the server dropped this request without answering it", "", ""), {},
        keep_alive_);
    connection_->post([connection = connection_, bytes = std::move(bytes)]() mutable {
      connection->write(std::move(bytes), true);
    });
  } else if (streaming_ && !finished_) {
    // A stream left open would hang the client: end it.
    connection_->post([connection = connection_, chunked = chunked_] {
      connection->write(chunked ? "0\r\n\r\n" : "", true);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// HttpRoutes

void HttpRoutes::add(const std::string& method, const std::string& path, HttpHandler handler) {
  routes_.push_back({method, path, std::move(handler)});
}

void HttpRoutes::dispatch(const std::shared_ptr<HttpExchange>& exchange) const {
  std::string allowed;
  for (const Route& route : routes_) {
    if (route.path != exchange->path()) continue;
    if (route.method == exchange->method()) {
      try {
        route.handler(exchange);
      } catch (const std::exception& e) {
        exchange->respond_error(500, std::string("internal error: ") + e.what());
      }
      return;
    }
    allowed += (allowed.empty() ? "" : ", ") + route.method;
  }
  if (!allowed.empty()) {
    exchange->respond(405, "application/json",
                      error_body(405,
                                 "method " + exchange->method() + " is not allowed on " +
                                     exchange->path() + "; use " + allowed,
                                 "", ""),
                      {{"Allow", allowed}});
    return;
  }
  if (fallback_) {
    fallback_(exchange);
    return;
  }
  exchange->respond_error(404, "no endpoint at " + exchange->path());
}

HttpHandler HttpRoutes::handler() const {
  auto routes = std::make_shared<HttpRoutes>(*this);
  return [routes](std::shared_ptr<HttpExchange> exchange) { routes->dispatch(exchange); };
}

// ---------------------------------------------------------------------------------------------
// HttpServer

class HttpServer::Impl {
 public:
  Impl(ServerOptions options, HttpHandler handler)
      : io_(std::make_shared<net::io_context>(std::max(1, options.threads))),
        shared_(std::make_shared<ServerShared>()),
        acceptor_(net::make_strand(*io_)) {
    shared_->options = std::move(options);
    shared_->handler = std::move(handler);
    const ServerOptions& opts = shared_->options;
    if (opts.threads < 1) {
      throw ServerError("http server: threads must be >= 1, got " + std::to_string(opts.threads));
    }
    const std::string where = opts.host + ":" + std::to_string(opts.port);
    beast::error_code ec;
    tcp::resolver resolver(*io_);
    const auto endpoints =
        resolver.resolve(opts.host, std::to_string(opts.port),
                         tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || endpoints.empty()) {
      throw ServerError("http server: cannot resolve host '" + opts.host + "' (" + ec.message() +
                        "); give an IP address such as 127.0.0.1 or 0.0.0.0");
    }
    const tcp::endpoint endpoint = endpoints.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      throw ServerError("http server: cannot listen on " + where + ": " + ec.message() +
                        " (is another server using the port? pick another one)");
    }
    port_ = acceptor_.local_endpoint().port();
    host_ = opts.host;
    accept();
    work_.emplace(net::make_work_guard(*io_));
    for (int i = 0; i < opts.threads; ++i) {
      threads_.emplace_back([io = io_] {
        while (true) {
          try {
            io->run();
            return;
          } catch (const std::exception& e) {
            OOZE_LOG(ERROR) << "http server: a handler threw on an io thread: " << e.what();
          }
        }
      });
    }
  }

  void accept() {
    acceptor_.async_accept(
        net::make_strand(*io_), [this](beast::error_code ec, tcp::socket socket) {
          if (!acceptor_.is_open() || shared_->stopping) return;
          if (ec) {
            // Out of descriptors and the like: wait a little rather than spin.
            OOZE_LOG(WARN) << "http server: accept failed: " << ec.message();
            auto timer = std::make_shared<net::steady_timer>(acceptor_.get_executor(),
                                                             std::chrono::milliseconds(100));
            timer->async_wait([this, timer](beast::error_code) {
              if (acceptor_.is_open() && !shared_->stopping) accept();
            });
            return;
          }
          beast::error_code ignored;
          socket.set_option(tcp::no_delay(true), ignored);  // events go out as soon as written
          std::shared_ptr<HttpConnection> connection;
          {
            std::lock_guard<std::mutex> lock(shared_->mutex);
            const uint64_t id = shared_->next_connection_id++;
            connection = std::make_shared<HttpConnection>(io_, shared_, std::move(socket), id);
            shared_->connections[id] = connection;
          }
          connection->start();
          accept();
        });
  }

  void stop(std::chrono::milliseconds drain) {
    if (stopped_) return;
    stopped_ = true;
    shared_->stopping = true;
    std::promise<void> closed;
    net::post(acceptor_.get_executor(), [this, &closed] {
      beast::error_code ignored;
      acceptor_.close(ignored);
      closed.set_value();
    });
    closed.get_future().wait();

    for_each_connection(
        [](const std::shared_ptr<HttpConnection>& c) { c->post([c] { c->server_stopping(); }); });
    const auto deadline = std::chrono::steady_clock::now() + drain;
    while (shared_->in_flight > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for_each_connection(
        [](const std::shared_ptr<HttpConnection>& c) { c->post([c] { c->close(); }); });
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      shared_->running = false;  // later posts (from exchanges still held) are dropped
    }
    work_.reset();
    for (std::thread& thread : threads_) thread.join();
    threads_.clear();
  }

  void for_each_connection(const std::function<void(const std::shared_ptr<HttpConnection>&)>& fn) {
    std::vector<std::shared_ptr<HttpConnection>> live;
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      for (const auto& [id, weak] : shared_->connections) {
        if (auto connection = weak.lock()) live.push_back(std::move(connection));
      }
    }
    for (const auto& connection : live) fn(connection);
  }

  std::shared_ptr<net::io_context> io_;
  std::shared_ptr<ServerShared> shared_;
  tcp::acceptor acceptor_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  std::string host_;
  bool stopped_ = false;
};

HttpServer::HttpServer(ServerOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() { stop(); }

uint16_t HttpServer::port() const { return impl_->port_; }

std::string HttpServer::url() const {
  const std::string& host = impl_->host_;
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(impl_->port_);
}

void HttpServer::stop(std::chrono::milliseconds drain) { impl_->stop(drain); }

int64_t HttpServer::requests_in_flight() const { return impl_->shared_->in_flight.load(); }

}  // namespace ooze::serving
