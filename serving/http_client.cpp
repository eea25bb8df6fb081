#include "serving/http_client.h"

#include <strings.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <limits>

namespace ooze::serving {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// Beast 1.74 compares lengths with an empty optional limit as if it were exceeded, so "no
// limit" is the largest value rather than boost::none.
constexpr std::uint64_t kNoBodyLimit = std::numeric_limits<std::uint64_t>::max();

std::string seconds_text(std::chrono::milliseconds duration) {
  const double seconds = static_cast<double>(duration.count()) / 1000.0;
  std::string text = std::to_string(seconds);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text + " s";
}

bool iequals(const std::string& a, const std::string& b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

HttpUrl HttpUrl::parse(const std::string& url) {
  const std::string usage = " (expected http://HOST:PORT, e.g. http://127.0.0.1:30000)";
  std::string rest = url;
  const std::string scheme = "http://";
  if (rest.rfind("https://", 0) == 0) {
    throw ConfigError("URL '" + url + "': https is not supported; engines and the router speak " +
                      "plain HTTP on a private network" + usage);
  }
  if (rest.rfind(scheme, 0) == 0) rest.erase(0, scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) {
    throw ConfigError("URL '" + url + "' has a path; give only the server's address" + usage);
  }
  HttpUrl parsed;
  std::string port_text;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      throw ConfigError("URL '" + url + "' has no port" + usage);
    }
    parsed.host = rest.substr(1, close - 1);
    port_text = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos) throw ConfigError("URL '" + url + "' has no port" + usage);
    parsed.host = rest.substr(0, colon);
    port_text = rest.substr(colon + 1);
  }
  if (parsed.host.empty()) throw ConfigError("URL '" + url + "' has no host" + usage);
  int port = 0;
  try {
    size_t used = 0;
    port = std::stoi(port_text, &used);
    if (used != port_text.size()) port = 0;
  } catch (const std::exception&) {
    port = 0;
  }
  if (port <= 0 || port > 65535) {
    throw ConfigError("URL '" + url + "': port '" + port_text + "' is not in 1..65535" + usage);
  }
  parsed.port = static_cast<uint16_t>(port);
  return parsed;
}

std::string HttpUrl::endpoint() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string HttpUrl::to_string() const { return "http://" + endpoint(); }

bool HttpResponse::is_event_stream() const {
  return content_type.rfind("text/event-stream", 0) == 0;
}

std::string HttpResponse::header(const std::string& name) const {
  for (const auto& [field, value] : headers) {
    if (iequals(field, name)) return value;
  }
  return "";
}

// One TCP connection with its own I/O context: a blocking call runs its asynchronous
// operations to completion on the calling thread, which is how Beast applies timeouts.
struct HttpClient::Connection {
  asio::io_context io;
  beast::tcp_stream stream{io};
  beast::flat_buffer buffer;

  // Starts one asynchronous operation with a completion handler and runs it to completion;
  // the stream's expiry (set by the caller) bounds it.
  template <class Start>
  beast::error_code run(Start start) {
    beast::error_code result = asio::error::would_block;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io.restart();
    io.run();
    return result;
  }
};

HttpClient::HttpClient(const std::string& url, HttpClientOptions options)
    : url_(HttpUrl::parse(url)), options_(options) {}

HttpClient::~HttpClient() = default;

std::unique_ptr<HttpClient::Connection> HttpClient::take_connection(const HttpRequest& request,
                                                                    bool* reused) {
  if (reused != nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<Connection> connection = std::move(idle_.back());
      idle_.pop_back();
      *reused = true;
      return connection;
    }
    *reused = false;
  }
  auto connection = std::make_unique<Connection>();
  const std::string where = request.method + " " + url_.to_string() + request.target;
  tcp::resolver resolver(connection->io);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(url_.host, std::to_string(url_.port), ec);
  if (ec) {
    throw HttpConnectionError(url_.endpoint(), "resolve",
                              where + ": cannot resolve host '" + url_.host + "': " + ec.message());
  }
  connection->stream.expires_after(options_.connect_timeout);
  ec = connection->run([&](auto handler) { connection->stream.async_connect(endpoints, handler); });
  if (ec == beast::error::timeout) {
    throw HttpTimeoutError(url_.endpoint(), "connect",
                           where + ": could not connect to " + url_.endpoint() + " within " +
                               seconds_text(options_.connect_timeout));
  }
  if (ec) {
    throw HttpConnectionError(url_.endpoint(), "connect",
                              where + ": could not connect to " + url_.endpoint() + ": " +
                                  ec.message() + " (is the server running?)");
  }
  return connection;
}

void HttpClient::keep_connection(std::unique_ptr<Connection> connection) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (idle_.size() < options_.max_idle_connections) idle_.push_back(std::move(connection));
}

HttpResponse HttpClient::send(const HttpRequest& request) { return exchange(request, nullptr); }

HttpResponse HttpClient::send_streaming(const HttpRequest& request,
                                        const SseEventHandler& on_event) {
  return exchange(request, &on_event);
}

HttpResponse HttpClient::exchange(const HttpRequest& request, const SseEventHandler* on_event) {
  const std::string where = request.method + " " + url_.to_string() + request.target;
  http::request<http::string_body> message;
  message.version(11);
  const http::verb verb = http::string_to_verb(request.method);
  if (verb == http::verb::unknown) {
    message.method_string(request.method);
  } else {
    message.method(verb);
  }
  message.target(request.target);
  message.set(http::field::host, url_.endpoint());
  message.set(http::field::user_agent, "ooze");
  if (on_event != nullptr) message.set(http::field::accept, "text/event-stream");
  for (const auto& [name, value] : request.headers) message.set(name, value);
  if (!request.body.empty()) message.set(http::field::content_type, request.content_type);
  message.body() = request.body;
  message.keep_alive(options_.keep_alive);
  message.prepare_payload();

  // A kept connection may have been closed by the server while idle; that shows as a failed
  // send or a read that ends before any byte of the response. Only then is the request sent
  // again, once, on a fresh connection (a server that closes an idle connection has not read
  // the request; one that died with it fails the fresh connect as well).
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    std::unique_ptr<Connection> connection =
        take_connection(request, options_.keep_alive && attempt == 0 ? &reused : nullptr);
    Connection& c = *connection;
    c.buffer.clear();

    c.stream.expires_after(request.timeout);
    beast::error_code ec =
        c.run([&](auto handler) { http::async_write(c.stream, message, handler); });
    if (ec == beast::error::timeout) {
      throw HttpTimeoutError(url_.endpoint(), "send",
                             where + ": could not send the request to " + url_.endpoint() +
                                 " within " + seconds_text(request.timeout));
    }
    if (ec) {
      if (reused) continue;
      throw HttpConnectionError(
          url_.endpoint(), "send",
          where + ": sending the request to " + url_.endpoint() + " failed: " + ec.message());
    }

    // Never returns: throws the error for a read that ended with `error`.
    auto throw_read_failure = [&](beast::error_code error, bool got_some, bool streaming) {
      if (error == beast::error::timeout) {
        throw HttpTimeoutError(
            url_.endpoint(), "read",
            where +
                (streaming ? ": the event stream from " + url_.endpoint() + " was silent for "
                           : ": no response from " + url_.endpoint() + " within ") +
                seconds_text(request.timeout));
      }
      const bool malformed =
          error.category() == http::make_error_code(http::error::bad_version).category() &&
          error != http::error::end_of_stream && error != http::error::partial_message;
      if (malformed) {
        throw HttpError(url_.endpoint(), "read",
                        where + ": the response from " + url_.endpoint() +
                            " is not valid HTTP: " + error.message());
      }
      throw HttpConnectionError(
          url_.endpoint(), "read",
          where +
              (got_some ? ": the connection to " + url_.endpoint() +
                              " broke before the response was complete: "
                        : ": " + url_.endpoint() + " closed the connection without a response: ") +
              error.message());
    };

    HttpResponse response;
    auto take_head = [&response](const http::response_header<>& head) {
      response.status = static_cast<int>(head.result_int());
      for (const auto& field : head) {
        response.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
      }
      response.content_type = std::string(head[http::field::content_type]);
    };

    if (on_event == nullptr) {
      http::response_parser<http::string_body> parser;
      parser.body_limit(kNoBodyLimit);  // generations with log-probs can be large
      ec = c.run([&](auto handler) { http::async_read(c.stream, c.buffer, parser, handler); });
      if (ec) {
        if (reused && !parser.got_some() && ec != beast::error::timeout) continue;
        throw_read_failure(ec, parser.got_some(), false);
      }
      take_head(parser.get().base());
      response.body = std::move(parser.get().body());
      if (parser.get().keep_alive() && options_.keep_alive) keep_connection(std::move(connection));
      return response;
    }

    http::response_parser<http::buffer_body> parser;
    parser.body_limit(kNoBodyLimit);  // a stream lasts as long as the generation
    ec = c.run([&](auto handler) { http::async_read_header(c.stream, c.buffer, parser, handler); });
    if (ec) {
      if (reused && !parser.got_some() && ec != beast::error::timeout) continue;
      throw_read_failure(ec, parser.got_some(), false);
    }
    take_head(parser.get().base());
    const bool event_stream = response.is_event_stream();
    SseDecoder decoder;
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof(chunk);
      c.stream.expires_after(request.timeout);
      ec = c.run([&](auto handler) { http::async_read_some(c.stream, c.buffer, parser, handler); });
      if (ec == http::error::need_buffer) ec = {};
      if (ec) throw_read_failure(ec, true, event_stream);
      const size_t received = sizeof(chunk) - parser.get().body().size;
      if (!event_stream) {
        response.body.append(chunk, received);
        continue;
      }
      for (const SseEvent& event : decoder.feed(std::string_view(chunk, received))) {
        if (!(*on_event)(event)) return response;  // the connection closes with `connection`
      }
    }
    if (parser.get().keep_alive() && options_.keep_alive) keep_connection(std::move(connection));
    return response;
  }
}

}  // namespace ooze::serving
