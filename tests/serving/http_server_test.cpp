// The generic HTTP server over real loopback sockets: routing, keep-alive, API key, size
// limits, malformed HTTP, SSE streams that arrive incrementally, disconnect detection, handlers
// answering from other threads, and shutdown with requests in flight.
#include "serving/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "tests/support/http_test_client.h"

namespace ooze::serving {
namespace http_server_test {

using testing::HttpReply;
using testing::raw_exchange;
using testing::TestHttpClient;

// Waits for a condition with a deadline (the server acts on its own threads).
template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return predicate();
}

struct Signal {
  std::mutex mutex;
  std::condition_variable changed;
  int value = 0;
  void set(int v) {
    std::lock_guard<std::mutex> lock(mutex);
    value = v;
    changed.notify_all();
  }
  bool wait_for(int v, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, limit, [&] { return value >= v; });
  }
};

class HttpServerTest : public ::testing::Test {
 protected:
  void start(ServerOptions options = {}) {
    HttpRoutes routes;
    routes.add("GET", "/health",
               [](std::shared_ptr<HttpExchange> ex) { ex->respond(200, "text/plain", "ok"); });
    routes.add("POST", "/echo", [](std::shared_ptr<HttpExchange> ex) {
      ex->respond(200, "application/octet-stream", ex->body(),
                  {{"X-Path", ex->path()}, {"X-Query", ex->query()}});
    });
    // Answers from another thread, later.
    routes.add("POST", "/later", [](std::shared_ptr<HttpExchange> ex) {
      std::thread([ex] {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        ex->respond(200, "text/plain", "later:" + ex->body());
      }).detach();
    });
    routes.add("GET", "/drop", [](std::shared_ptr<HttpExchange>) {});
    routes.add("GET", "/throw",
               [](std::shared_ptr<HttpExchange>) { throw std::runtime_error("handler failure"); });
    // Never answers; records when the client goes away.
    routes.add("POST", "/hang", [this](std::shared_ptr<HttpExchange> ex) {
      ex->on_close([this] { hang_closed_.set(1); });
      std::lock_guard<std::mutex> lock(mutex_);
      held_.push_back(ex);
    });
    // Streams events: the first at once, the rest only after the test saw the first (which
    // proves events are delivered as they are sent), then until the client leaves or 200.
    routes.add("POST", "/stream", [this](std::shared_ptr<HttpExchange> ex) {
      ex->start_stream();
      ex->on_close([this] { stream_closed_.set(1); });
      std::thread([this, ex] {
        ex->send_event("{\"i\":0}");
        first_seen_.wait_for(1);
        int i = 1;
        for (; i < 200; ++i) {
          if (!ex->send_event("{\"i\":" + std::to_string(i) + "}")) break;
          if (slow_stream_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        events_sent_ = i;
        if (i == 200) {
          ex->send_event("[DONE]");
          ex->finish();
        }
        stream_ended_.set(1);
      }).detach();
    });
    routes.add("GET", "/both",
               [](std::shared_ptr<HttpExchange> ex) { ex->respond(200, "text/plain", "get"); });
    routes.add("POST", "/both",
               [](std::shared_ptr<HttpExchange> ex) { ex->respond(200, "text/plain", "post"); });
    server_ = std::make_unique<HttpServer>(options, routes.handler());
  }

  void TearDown() override {
    if (server_) server_->stop();
    std::lock_guard<std::mutex> lock(mutex_);
    held_.clear();
  }

  uint16_t port() const { return server_->port(); }

  std::unique_ptr<HttpServer> server_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<HttpExchange>> held_;
  Signal hang_closed_, stream_closed_, first_seen_, stream_ended_;
  std::atomic<int> events_sent_{0};
  bool slow_stream_ = false;
};

TEST_F(HttpServerTest, RoutesRequestsOverOneKeepAliveConnection) {
  start();
  EXPECT_TRUE(server_->url().rfind("http://127.0.0.1:", 0) == 0);
  TestHttpClient client(port());
  HttpReply health = client.request("GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok");
  HttpReply echo = client.request("POST", "/echo?x=1&y=2", "hello body");
  EXPECT_EQ(echo.status, 200);
  EXPECT_EQ(echo.body, "hello body");
  EXPECT_EQ(echo.header("x-path"), "/echo");
  EXPECT_EQ(echo.header("x-query"), "x=1&y=2");
  EXPECT_EQ(client.request("POST", "/later", "abc").body, "later:abc");
  EXPECT_EQ(client.request("GET", "/both").body, "get");
  EXPECT_EQ(client.request("POST", "/both").body, "post");

  HttpReply missing = client.request("GET", "/nowhere");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.json()["error"]["type"], "invalid_request_error");
  HttpReply wrong_method = client.request("DELETE", "/echo");
  EXPECT_EQ(wrong_method.status, 405);
  EXPECT_EQ(wrong_method.header("allow"), "POST");
  EXPECT_NE(wrong_method.json()["error"]["message"].get<std::string>().find("POST"),
            std::string::npos);
  // Still the same connection, still serving.
  EXPECT_EQ(client.request("GET", "/health").status, 200);
  EXPECT_TRUE(eventually([&] { return server_->requests_in_flight() == 0; }));
}

TEST_F(HttpServerTest, HandlerThatThrowsOrDropsTheExchangeGets500) {
  start();
  TestHttpClient client(port());
  HttpReply thrown = client.request("GET", "/throw");
  EXPECT_EQ(thrown.status, 500);
  EXPECT_NE(thrown.body.find("handler failure"), std::string::npos);
  EXPECT_EQ(thrown.json()["error"]["type"], "server_error");
  EXPECT_EQ(client.request("GET", "/drop").status, 500);
  EXPECT_EQ(client.request("GET", "/health").status, 200);
}

TEST_F(HttpServerTest, ApiKeyGuardsEveryPathButHealth) {
  ServerOptions options;
  options.api_key = "sk-test-key";
  start(options);
  TestHttpClient client(port());
  EXPECT_EQ(client.request("GET", "/health").status, 200);
  HttpReply none = client.request("POST", "/echo", "x");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.json()["error"]["type"], "authentication_error");
  EXPECT_EQ(client.request("POST", "/echo", "x", {{"Authorization", "Bearer sk-test-kez"}}).status,
            401);
  EXPECT_EQ(client.request("POST", "/echo", "x", {{"Authorization", "Bearer sk-test-key2"}}).status,
            401);
  EXPECT_EQ(client.request("POST", "/echo", "x", {{"Authorization", "sk-test-key"}}).status, 401);
  // An unknown path is not revealed without the key either.
  EXPECT_EQ(client.request("GET", "/nowhere").status, 401);
  // POST /health is not the public GET /health.
  EXPECT_EQ(client.request("POST", "/health").status, 401);
  HttpReply good = client.request("POST", "/echo", "x", {{"Authorization", "Bearer sk-test-key"}});
  EXPECT_EQ(good.status, 200);
  EXPECT_EQ(good.body, "x");
  EXPECT_EQ(client.request("POST", "/echo", "y", {{"authorization", "bearer sk-test-key"}}).status,
            200);
}

TEST_F(HttpServerTest, OversizedBodyAndHeadersAreRejected) {
  ServerOptions options;
  options.max_body_bytes = 1000;
  options.max_header_bytes = 2000;
  start(options);
  HttpReply big_body =
      raw_exchange(port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" +
                               std::string(5000, 'a'));
  EXPECT_EQ(big_body.status, 413);
  EXPECT_EQ(nlohmann::json::parse(big_body.body)["error"]["code"], 413);
  // A body at the limit is fine.
  TestHttpClient client(port());
  EXPECT_EQ(client.request("POST", "/echo", std::string(1000, 'b')).body, std::string(1000, 'b'));
  HttpReply big_header = raw_exchange(
      port(), "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4000, 'h') + "\r\n\r\n");
  EXPECT_EQ(big_header.status, 431);
  // A chunked body over the limit, too.
  HttpReply chunked =
      raw_exchange(port(),
                   "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                   "\r\n800\r\n" +
                       std::string(2048, 'c') + "\r\n0\r\n\r\n");
  EXPECT_EQ(chunked.status, 413);
  EXPECT_EQ(TestHttpClient(port()).request("GET", "/health").status, 200);
}

TEST_F(HttpServerTest, MalformedHttpIsAnsweredWith400OrClosed) {
  start();
  const std::vector<std::string> garbage = {
      "GARBAGE\r\n\r\n",
      "GET\r\n\r\n",
      "GET /health HTTP/1.1\r\nBad Header Line\r\n\r\n",
      "POST /echo HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
      "POST /echo HTTP/1.1\r\nContent-Length: 12abc\r\n\r\n",
      "POST /echo HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      std::string("\x00\x01\x02\xff\xfe", 5),
      "\r\n\r\n\r\n",
  };
  for (const std::string& bytes : garbage) {
    HttpReply reply = raw_exchange(port(), bytes, std::chrono::seconds(2));
    EXPECT_TRUE(reply.status == 0 || reply.status == 400) << reply.status << " for " << bytes;
  }
  const int version_status = raw_exchange(port(), "GET /health HTTP/2.0\r\n\r\n").status;
  EXPECT_TRUE(version_status == 400 || version_status == 505) << version_status;
  // A body shorter than its Content-Length: the server waits for the rest; the client gives
  // up and closes. Nothing stays in flight.
  raw_exchange(port(), "POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\nshort",
               std::chrono::milliseconds(200));
  EXPECT_EQ(TestHttpClient(port()).request("GET", "/health").status, 200);
  EXPECT_TRUE(eventually([&] { return server_->requests_in_flight() == 0; }));
}

TEST_F(HttpServerTest, RandomBytesNeverStopTheServer) {
  start();
  std::mt19937 rng(1234);
  const std::string valid = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
  int answered = 0;
  for (int i = 0; i < 200; ++i) {
    std::string bytes = valid;
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations; ++m) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          bytes.erase(at, 1 + rng() % 3);
          break;
        default:
          bytes.insert(at, 1, static_cast<char>(rng() % 256));
          break;
      }
      if (bytes.empty()) bytes = "x";
    }
    HttpReply reply = raw_exchange(port(), bytes + "\r\n\r\n", std::chrono::milliseconds(300));
    if (reply.status != 0) {
      ++answered;
      EXPECT_TRUE(reply.status == 200 || (reply.status >= 400 && reply.status < 500))
          << reply.status;
    }
  }
  EXPECT_GT(answered, 50);
  EXPECT_EQ(TestHttpClient(port()).request("POST", "/echo", "still").body, "still");
  EXPECT_TRUE(eventually([&] { return server_->requests_in_flight() == 0; }));
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  start();
  HttpReply first = raw_exchange(port(),
                                 "POST /later HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nA"
                                 "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nB");
  EXPECT_EQ(first.body, "later:A");
  // Both, read with a raw socket.
  testing::test_net::io_context io;
  testing::test_beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::seconds(5));
  stream.connect({testing::test_net::ip::make_address("127.0.0.1"), port()});
  testing::test_net::write(stream, testing::test_net::buffer(std::string(
                                       "POST /later HTTP/1.1\r\nContent-Length: 1\r\n\r\nA"
                                       "POST /echo HTTP/1.1\r\nContent-Length: 1\r\n\r\nB")));
  testing::test_beast::flat_buffer buffer;
  for (const std::string expected : {"later:A", "B"}) {
    testing::test_http::response<testing::test_http::string_body> response;
    testing::test_http::read(stream, buffer, response);
    EXPECT_EQ(response.body(), expected);
  }
}

TEST_F(HttpServerTest, ExpectContinueGetsA100BeforeTheBodyIsSent) {
  start();
  namespace net = testing::test_net;
  namespace http = testing::test_http;
  net::io_context io;
  net::ip::tcp::socket socket(io);
  socket.connect({net::ip::make_address("127.0.0.1"), port()});
  net::write(socket,
             net::buffer(std::string(
                 "POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")));
  testing::test_beast::flat_buffer buffer;
  http::response<http::empty_body> interim;
  http::read(socket, buffer, interim);
  EXPECT_EQ(interim.result_int(), 100u);
  net::write(socket, net::buffer(std::string("abc")));
  http::response<http::string_body> response;
  http::read(socket, buffer, response);
  EXPECT_EQ(response.result_int(), 200u);
  EXPECT_EQ(response.body(), "abc");
}

TEST_F(HttpServerTest, StreamEventsArriveAsTheyAreSent) {
  start();
  TestHttpClient client(port());
  client.start_stream("/stream", nlohmann::json::object());
  EXPECT_EQ(client.stream_status(), 200);
  // The handler sends event 1 only after this point: reading event 0 cannot rely on the whole
  // stream being buffered.
  std::optional<std::string> first = client.next_event();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, "{\"i\":0}");
  first_seen_.set(1);
  std::vector<std::string> rest = client.rest_of_stream();
  ASSERT_EQ(rest.size(), 200u);
  for (int i = 1; i < 200; ++i) EXPECT_EQ(rest[i - 1], "{\"i\":" + std::to_string(i) + "}");
  EXPECT_EQ(rest.back(), "[DONE]");
  // The connection is reusable after the stream.
  EXPECT_EQ(client.request("GET", "/health").status, 200);
  EXPECT_EQ(stream_closed_.value, 0);  // a completed stream is not a disconnect
}

TEST_F(HttpServerTest, ClientLeavingMidStreamIsNoticed) {
  start();
  slow_stream_ = true;
  {
    TestHttpClient client(port());
    client.start_stream("/stream", nlohmann::json::object());
    ASSERT_TRUE(client.next_event().has_value());
    first_seen_.set(1);
    ASSERT_TRUE(client.next_event().has_value());
    client.close();
  }
  EXPECT_TRUE(stream_closed_.wait_for(1));
  EXPECT_TRUE(stream_ended_.wait_for(1));
  EXPECT_LT(events_sent_.load(), 200);  // send_event reported the client gone
  EXPECT_TRUE(eventually([&] { return server_->requests_in_flight() == 0; }));
}

TEST_F(HttpServerTest, ClientLeavingBeforeTheAnswerIsNoticed) {
  start();
  {
    testing::test_net::io_context io;
    testing::test_net::ip::tcp::socket socket(io);
    socket.connect({testing::test_net::ip::make_address("127.0.0.1"), port()});
    testing::test_net::write(
        socket, testing::test_net::buffer(
                    std::string("POST /hang HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")));
    ASSERT_TRUE(eventually([&] {
      std::lock_guard<std::mutex> lock(mutex_);
      return held_.size() == 1;
    }));
    EXPECT_FALSE(held_[0]->client_gone());
    EXPECT_EQ(server_->requests_in_flight(), 1);
  }  // the socket closes
  EXPECT_TRUE(hang_closed_.wait_for(1));
  EXPECT_TRUE(held_[0]->client_gone());
  // Answering a request whose client is gone is harmless; on_close after the fact runs at once.
  held_[0]->respond(200, "text/plain", "too late");
  bool ran = false;
  held_[0]->on_close([&] { ran = true; });
  EXPECT_TRUE(ran);
  EXPECT_TRUE(eventually([&] { return server_->requests_in_flight() == 0; }));
}

TEST_F(HttpServerTest, ConcurrentClientsAreAllAnswered) {
  start();
  constexpr int kThreads = 16, kRequests = 25;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      TestHttpClient client(port());
      for (int r = 0; r < kRequests; ++r) {
        const std::string body = std::to_string(t) + "-" + std::to_string(r);
        HttpReply reply = client.request("POST", r % 2 ? "/later" : "/echo", body);
        if (reply.status == 200 && reply.body == (r % 2 ? "later:" : "") + body) ++good;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), kThreads * kRequests);
}

TEST_F(HttpServerTest, StopDrainsRequestsInFlightAndExchangesMayOutliveTheServer) {
  start();
  std::promise<HttpReply> reply;
  std::thread client_thread([&] {
    TestHttpClient client(port());
    reply.set_value(client.request("POST", "/hang", "x"));
  });
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_.size() == 1;
  }));
  // Answer while stop() drains: the response still goes out.
  std::thread answer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    held_[0]->respond(200, "text/plain", "drained");
  });
  server_->stop(std::chrono::seconds(5));
  answer.join();
  client_thread.join();
  EXPECT_EQ(reply.get_future().get().body, "drained");
  // After stop: new connections are refused, and late calls on exchanges do nothing.
  EXPECT_THROW(TestHttpClient(port(), std::chrono::seconds(1)), std::exception);
  held_[0]->send_event("late");
  held_[0]->finish();
  server_.reset();
  held_.clear();  // the last reference to the connection goes after the server
}

TEST_F(HttpServerTest, StopClosesRequestsThatDoNotFinish) {
  start();
  std::thread client_thread([&] {
    try {
      TestHttpClient(port()).request("POST", "/hang", "x");
    } catch (const std::exception&) {
    }
  });
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_.size() == 1;
  }));
  server_->stop(std::chrono::milliseconds(50));
  client_thread.join();
  EXPECT_TRUE(hang_closed_.wait_for(1));
  EXPECT_EQ(server_->requests_in_flight(), 0);
}

TEST(HttpServerOptions, PortInUseIsAClearError) {
  HttpServer first(ServerOptions{},
                   [](std::shared_ptr<HttpExchange> ex) { ex->respond(200, "text/plain", ""); });
  ServerOptions options;
  options.port = first.port();
  try {
    HttpServer second(options, [](std::shared_ptr<HttpExchange>) {});
    FAIL() << "binding a taken port succeeded";
  } catch (const ServerError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos);
  }
}

}  // namespace http_server_test
}  // namespace ooze::serving
