// The HTTP client against the real HTTP server on loopback, and the event-stream decoder.
#include "serving/http_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "serving/http_server.h"
#include "serving/sse_decoder.h"
#include "tests/support/expect_error.h"

namespace ooze::serving {
namespace http_client_test {

using namespace std::chrono_literals;
using ooze::testing::error_message_of;

// ---- the event-stream decoder ----

std::vector<SseEvent> decode_in_pieces(const std::string& bytes, size_t piece) {
  SseDecoder decoder;
  std::vector<SseEvent> events;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    for (SseEvent& event : decoder.feed(std::string_view(bytes).substr(at, piece))) {
      events.push_back(std::move(event));
    }
  }
  return events;
}

TEST(SseDecoder, EventsAreTheSameHoweverTheBytesArriveSplit) {
  const std::string stream =
      ": a comment\r\n"
      "data: {\"i\":0}\r\n\r\n"
      "event: update\nid: 7\ndata: line one\ndata:line two\n\n"
      "data: [DONE]\r\r"
      "retry: 100\n\n"     // no data: not an event
      "data: no end yet";  // incomplete: not an event
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    const std::vector<SseEvent> events = decode_in_pieces(stream, piece);
    ASSERT_EQ(events.size(), 3u) << "piece " << piece;
    EXPECT_EQ(events[0].data, "{\"i\":0}");
    EXPECT_EQ(events[0].event, "");
    EXPECT_EQ(events[1].event, "update");
    EXPECT_EQ(events[1].id, "7");
    EXPECT_EQ(events[1].data, "line one\nline two");
    EXPECT_EQ(events[2].data, "[DONE]");
  }
}

TEST(SseDecoder, EncodedEventsDecodeToThemselves) {
  const std::vector<SseEvent> sent = {
      {"", "{\"text\":\"a\"}", ""}, {"progress", "two\nlines", "42"}, {"", "", ""}};
  std::string wire;
  for (const SseEvent& event : sent) wire += encode_sse_event(event);
  EXPECT_EQ(encode_sse_event(sent[0]), "data: {\"text\":\"a\"}\n\n");
  const std::vector<SseEvent> received = decode_in_pieces(wire, 3);
  ASSERT_EQ(received.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(received[i].event, sent[i].event);
    EXPECT_EQ(received[i].data, sent[i].data);
    EXPECT_EQ(received[i].id, sent[i].id);
  }
}

// ---- URLs ----

TEST(HttpUrl, ParsesHostAndPortAndRejectsWhatItCannotServe) {
  const HttpUrl url = HttpUrl::parse("http://127.0.0.1:30000/");
  EXPECT_EQ(url.host, "127.0.0.1");
  EXPECT_EQ(url.port, 30000);
  EXPECT_EQ(url.to_string(), "http://127.0.0.1:30000");
  EXPECT_EQ(HttpUrl::parse("localhost:8").endpoint(), "localhost:8");
  EXPECT_EQ(HttpUrl::parse("http://[::1]:9").endpoint(), "[::1]:9");
  EXPECT_CONTAINS(error_message_of([] { HttpUrl::parse("https://a:1"); }), "https");
  EXPECT_CONTAINS(error_message_of([] { HttpUrl::parse("http://a"); }), "has no port");
  EXPECT_CONTAINS(error_message_of([] { HttpUrl::parse("http://a:70000"); }), "1..65535");
  EXPECT_CONTAINS(error_message_of([] { HttpUrl::parse("http://a:1/generate"); }), "path");
}

// ---- the client against a real server ----

// Counts up and wakes waiters.
class Counter {
 public:
  void add() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++value_;
    changed_.notify_all();
  }
  // True once the value reaches `target`; false after the timeout.
  bool wait_for(int target, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return value_ >= target; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int value_ = 0;
};

class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpRoutes routes;
    routes.add("POST", "/echo", [this](std::shared_ptr<HttpExchange> ex) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        client_addresses_.insert(ex->remote_address());
      }
      ex->respond(201, "text/plain", ex->method() + " " + ex->body(),
                  {{"X-Authorization", ex->header("Authorization")}});
    });
    routes.add("GET", "/slow", [](std::shared_ptr<HttpExchange> ex) {
      std::thread([ex] {
        std::this_thread::sleep_for(1s);
        ex->respond(200, "text/plain", "late");
      }).detach();
    });
    // Each event after the first is sent only once the client has handled the one before:
    // a client that held events back would make the stream wait out its timeout.
    routes.add("POST", "/stream", [this](std::shared_ptr<HttpExchange> ex) {
      ex->start_stream();
      std::lock_guard<std::mutex> lock(mutex_);
      producers_.emplace_back([this, ex] {
        for (int i = 0; i < 4; ++i) {
          if (i > 0 && !acks_.wait_for(i)) ++ack_timeouts_;
          if (!ex->send_event("{\"i\":" + std::to_string(i) + "}")) return;
        }
        ex->send_event("[DONE]");
        ex->finish();
      });
    });
    routes.add("POST", "/not-a-stream", [](std::shared_ptr<HttpExchange> ex) {
      ex->respond_error(400, "sampling_params.top_p: must be in (0, 1]");
    });
    ServerOptions options;
    options.idle_timeout = 300ms;  // closes kept connections behind the client's back
    server_ = std::make_unique<HttpServer>(options, routes.handler());
  }

  void TearDown() override {
    server_->stop();
    for (std::thread& producer : producers_) producer.join();
  }

  std::unique_ptr<HttpServer> server_;
  std::mutex mutex_;
  std::set<std::string> client_addresses_;
  std::vector<std::thread> producers_;
  Counter acks_;
  std::atomic<int> ack_timeouts_{0};
};

TEST_F(HttpClientTest, SendsRequestsAndReusesTheConnection) {
  HttpClient client(server_->url());
  HttpRequest request;
  request.method = "POST";
  request.target = "/echo";
  request.body = "{\"a\":1}";
  request.headers = {{"Authorization", "Bearer k"}};
  for (int i = 0; i < 3; ++i) {
    const HttpResponse response = client.send(request);
    EXPECT_EQ(response.status, 201);
    EXPECT_TRUE(response.ok());
    EXPECT_EQ(response.body, "POST {\"a\":1}");
    EXPECT_EQ(response.content_type, "text/plain");
    EXPECT_EQ(response.header("x-authorization"), "Bearer k");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  EXPECT_EQ(client_addresses_.size(), 1u) << "three requests, one kept connection";
}

TEST_F(HttpClientTest, AConnectionTheServerClosedWhileIdleIsReplaced) {
  HttpClient client(server_->url());
  HttpRequest request;
  request.method = "POST";
  request.target = "/echo";
  request.body = "x";
  EXPECT_EQ(client.send(request).status, 201);
  std::this_thread::sleep_for(700ms);  // past the server's idle timeout
  EXPECT_EQ(client.send(request).body, "POST x");
  std::lock_guard<std::mutex> lock(mutex_);
  EXPECT_EQ(client_addresses_.size(), 2u);
}

TEST_F(HttpClientTest, WithoutKeepAliveEveryRequestHasItsOwnConnection) {
  HttpClientOptions options;
  options.keep_alive = false;
  HttpClient client(server_->url(), options);
  HttpRequest request;
  request.method = "POST";
  request.target = "/echo";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(client.send(request).status, 201);
  std::lock_guard<std::mutex> lock(mutex_);
  EXPECT_EQ(client_addresses_.size(), 3u);
}

TEST_F(HttpClientTest, EventsArriveOneByOneAsTheServerSendsThem) {
  HttpClient client(server_->url());
  HttpRequest request;
  request.method = "POST";
  request.target = "/stream";
  std::vector<std::string> data;
  const HttpResponse response = client.send_streaming(request, [&](const SseEvent& event) {
    data.push_back(event.data);
    acks_.add();
    return true;
  });
  EXPECT_EQ(response.status, 200);
  EXPECT_TRUE(response.is_event_stream());
  EXPECT_EQ(response.body, "");
  EXPECT_EQ(data, (std::vector<std::string>{"{\"i\":0}", "{\"i\":1}", "{\"i\":2}", "{\"i\":3}",
                                            "[DONE]"}));
  EXPECT_EQ(ack_timeouts_, 0) << "an event was held back until more bytes came";
  // The connection went back to the pool after the stream's last chunk.
  HttpRequest echo;
  echo.method = "POST";
  echo.target = "/echo";
  EXPECT_EQ(client.send(echo).status, 201);
}

TEST_F(HttpClientTest, AnErrorAnswerToAStreamingRequestComesBackWhole) {
  HttpClient client(server_->url());
  HttpRequest request;
  request.method = "POST";
  request.target = "/not-a-stream";
  int events = 0;
  const HttpResponse response = client.send_streaming(request, [&](const SseEvent&) {
    ++events;
    return true;
  });
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(events, 0);
  EXPECT_CONTAINS(response.body, "sampling_params.top_p");
}

TEST_F(HttpClientTest, StoppingAStreamEarlyClosesTheConnection) {
  HttpClient client(server_->url());
  HttpRequest request;
  request.method = "POST";
  request.target = "/stream";
  int events = 0;
  client.send_streaming(request, [&](const SseEvent&) {
    ++events;
    acks_.add();
    return false;
  });
  EXPECT_EQ(events, 1);
  for (int i = 0; i < 4; ++i) acks_.add();  // the server's producer need not wait any longer
}

TEST_F(HttpClientTest, TimeoutsAndRefusedConnectionsNameTheServer) {
  HttpClient client(server_->url());
  HttpRequest slow;
  slow.target = "/slow";
  slow.timeout = 200ms;
  const std::string endpoint = client.url().endpoint();
  try {
    client.send(slow);
    ADD_FAILURE() << "expected a timeout";
  } catch (const HttpTimeoutError& e) {
    EXPECT_EQ(e.endpoint(), endpoint);
    EXPECT_EQ(e.step(), "read");
    EXPECT_CONTAINS(e.what(), "no response from " + endpoint + " within 0.2 s");
  }
  slow.timeout = 5s;
  EXPECT_EQ(client.send(slow).body, "late");

  server_->stop();
  try {
    client.send(slow);
    ADD_FAILURE() << "expected a connection error";
  } catch (const HttpConnectionError& e) {
    EXPECT_EQ(e.endpoint(), endpoint);
    EXPECT_EQ(e.step(), "connect");
    EXPECT_CONTAINS(e.what(), "GET http://" + endpoint + "/slow: could not connect to " + endpoint);
  }
}

}  // namespace http_client_test
}  // namespace ooze::serving
