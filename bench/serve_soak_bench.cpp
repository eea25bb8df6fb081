// `ooze serve` and `ooze router` under load, on loopback. The real binaries serve the tiny byte
// model; 1,000 keep-alive connections send 20,000 requests to each of them in turn (the router
// forwards to the same server). The requests are mixed:
//
//   82%  /generate, prompts of 1-400 bytes, 1-32 new tokens, a quarter of them streamed (SSE)
//    6%  the same request, with the connection closed 0-50 ms after it is sent (a client that
//        goes away: the server must abort it and free its KV blocks)
//    4%  a connection closed after half a request was sent
//    4%  a body that is not JSON: 400
//    4%  a Content-Length over the 64 MiB a body may have: 413
//
// Afterwards, once the server has nothing in flight, it counts what could have leaked:
//   * the server's open file descriptors, threads and RSS against its own baseline (taken after
//     a warm-up of the same mix at the same concurrency, so first-use allocations are in it);
//   * KV blocks: all must be free (prefix-cached blocks no sequence holds count as free), with
//     nothing running or waiting.
//
// Lines: per target (serve, router):
//   requests/s, p50 and p99 latency of the answered /generate calls, errors (by kind on stderr),
//   fds/threads/RSS after against before (ratio 1.0: back to baseline), and leaked KV blocks;
//   then, after --rounds more soaks of the same size, the RSS each later request added against
//   what each request of the first soak added. The allocator keeps freed memory for reuse, so a
//   soak can leave RSS above the baseline without leaking; a leak grows the same in every round
//   (ratio near 1), kept memory is reused (ratio near 0).
//
//   bench_serve_soak_bench [--connections 1000] [--requests 20000] [--rounds 1]
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_support.h"
#include "core/load_time_settings.h"
#include "serving/http_client.h"
#include "tests/support/process.h"
#include "tests/support/tiny_model.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using ooze::bench::print_line;

// Over the 64 MiB body both servers take by default (--max-body-mb): announced, never sent.
constexpr int64_t kOversizedBytes = int64_t{65} << 20;

enum class Kind { kGenerate, kAbortAfterSend, kHalfRequest, kMalformed, kOversized };

Kind pick_kind(std::mt19937& rng) {
  const int roll = std::uniform_int_distribution<int>(0, 99)(rng);
  if (roll < 82) return Kind::kGenerate;
  if (roll < 88) return Kind::kAbortAfterSend;
  if (roll < 92) return Kind::kHalfRequest;
  if (roll < 96) return Kind::kMalformed;
  return Kind::kOversized;
}

std::string generate_body(std::mt19937& rng) {
  const int length = std::uniform_int_distribution<int>(1, 400)(rng);
  std::string text;
  for (int i = 0; i < length; ++i) {
    text += static_cast<char>(std::uniform_int_distribution<int>('a', 'z')(rng));
  }
  nlohmann::json body = {
      {"text", text},
      {"sampling_params",
       {{"max_new_tokens", std::uniform_int_distribution<int>(1, 32)(rng)}, {"temperature", 1.0}}},
      {"stream", std::uniform_int_distribution<int>(0, 3)(rng) == 0}};
  return body.dump();
}

// What one soak saw.
struct SoakResult {
  std::map<std::string, int64_t> outcomes;  // "ok", "aborted", "400", "413", errors by kind
  std::vector<double> latencies;            // seconds, of answered /generate calls
  double seconds = 0;
  int64_t errors() const {
    int64_t n = 0;
    for (const auto& [kind, count] : outcomes) {
      if (kind != "ok" && kind != "aborted" && kind != "half_sent" && kind != "400" &&
          kind != "413") {
        n += count;
      }
    }
    return n;
  }
};

// `connections` clients on one io_context, each sending requests until `requests` have been
// started, reconnecting when a request closed its connection.
class Soak {
 public:
  Soak(uint16_t port, int connections, int requests)
      : endpoint_(asio::ip::make_address("127.0.0.1"), port),
        connections_(connections),
        remaining_(requests) {}

  SoakResult run() {
    const auto start = Clock::now();
    for (int i = 0; i < connections_; ++i) connect(std::make_shared<Connection>(io_, i));
    io_.run();
    result_.seconds = ooze::seconds_since(start);
    return std::move(result_);
  }

 private:
  struct Connection {
    Connection(asio::io_context& io, int seed) : stream(io), timer(io), rng(seed) {}
    beast::tcp_stream stream;
    asio::steady_timer timer;
    std::mt19937 rng;
    beast::flat_buffer buffer;
    http::request<http::string_body> request;
    http::response<http::string_body> response;
    Kind kind = Kind::kGenerate;
    Clock::time_point started;
  };
  using Ptr = std::shared_ptr<Connection>;

  void count(const std::string& outcome) { ++result_.outcomes[outcome]; }

  void connect(Ptr c) {
    if (remaining_ <= 0) return;
    c->stream.expires_after(std::chrono::seconds(30));
    c->stream.async_connect(endpoint_, [this, c](beast::error_code error) {
      if (error) {
        count("connect: " + error.message());
        reconnect(c);
        return;
      }
      next_request(c);
    });
  }

  void reconnect(Ptr c) {
    beast::error_code ignored;
    c->stream.socket().close(ignored);
    auto fresh = std::make_shared<Connection>(io_, static_cast<int>(c->rng()));
    connect(fresh);
  }

  void next_request(Ptr c) {
    if (remaining_ <= 0) {
      beast::error_code ignored;
      c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      return;
    }
    --remaining_;
    c->kind = pick_kind(c->rng);
    c->request = {};
    c->request.method(http::verb::post);
    c->request.target("/generate");
    c->request.version(11);
    c->request.set(http::field::host, "127.0.0.1");
    c->request.set(http::field::content_type, "application/json");
    c->request.keep_alive(true);
    switch (c->kind) {
      case Kind::kMalformed:
        c->request.body() = "{\"text\": \"unterminated";
        c->request.prepare_payload();
        break;
      case Kind::kOversized:
        // The headers announce more than the server takes; it must answer 413 from them.
        c->request.set(http::field::content_length, std::to_string(kOversizedBytes));
        break;
      default:
        c->request.body() = generate_body(c->rng);
        c->request.prepare_payload();
    }
    c->started = Clock::now();
    c->stream.expires_after(std::chrono::seconds(300));
    if (c->kind == Kind::kHalfRequest) {
      // Half of the serialized request, then the connection goes.
      std::ostringstream text;
      text << c->request;
      auto half = std::make_shared<std::string>(text.str().substr(0, text.str().size() / 2));
      asio::async_write(c->stream, asio::buffer(*half), [this, c, half](beast::error_code, size_t) {
        count("half_sent");
        reconnect(c);
      });
      return;
    }
    http::async_write(c->stream, c->request, [this, c](beast::error_code error, size_t) {
      // The server may answer a 413 and close before taking the announced body.
      if (error && c->kind != Kind::kOversized) {
        count("write: " + error.message());
        reconnect(c);
        return;
      }
      if (c->kind == Kind::kAbortAfterSend) {
        c->timer.expires_after(
            std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 50)(c->rng)));
        c->timer.async_wait([this, c](beast::error_code) {
          count("aborted");
          reconnect(c);
        });
        return;
      }
      read_response(c);
    });
  }

  void read_response(Ptr c) {
    c->response = {};
    c->response.body().clear();
    http::async_read(c->stream, c->buffer, c->response, [this, c](beast::error_code error, size_t) {
      if (error) {
        count("read: " + error.message());
        reconnect(c);
        return;
      }
      const int status = c->response.result_int();
      const int expected = c->kind == Kind::kMalformed   ? 400
                           : c->kind == Kind::kOversized ? 413
                                                         : 200;
      if (status != expected) {
        count("status " + std::to_string(status) + " where " + std::to_string(expected));
      } else if (expected == 200) {
        count("ok");
        result_.latencies.push_back(ooze::seconds_since(c->started));
      } else {
        count(std::to_string(status));
      }
      if (c->response.keep_alive()) {
        next_request(c);
      } else {
        reconnect(c);
      }
    });
  }

  asio::io_context io_;
  tcp::endpoint endpoint_;
  int connections_;
  int remaining_;
  SoakResult result_;
};

// What /proc says of a process: open file descriptors, threads, resident memory.
struct ProcessUsage {
  int64_t fds = 0, threads = 0, rss_kb = 0;
};

ProcessUsage usage_of(pid_t pid) {
  namespace fs = std::filesystem;
  ProcessUsage usage;
  const std::string proc = "/proc/" + std::to_string(pid);
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(proc + "/fd")) ++usage.fds;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(proc + "/task")) {
    ++usage.threads;
  }
  std::ifstream status(proc + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) usage.rss_kb = std::stoll(line.substr(6));
  }
  return usage;
}

ooze::serving::HttpRequest get(const std::string& path) {
  ooze::serving::HttpRequest request;
  request.target = path;
  return request;
}

nlohmann::json server_stats(ooze::serving::HttpClient& client) {
  return nlohmann::json::parse(client.send(get("/get_server_info")).body);
}

// Waits until the server has no request in flight and nothing running or waiting.
nlohmann::json quiesced_stats(ooze::serving::HttpClient& client) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    nlohmann::json info = server_stats(client);
    const bool idle = info["requests_in_flight"] == 1 &&  // this very call
                      info["stats"]["running_sequences"] == 0 &&
                      info["stats"]["waiting_sequences"] == 0;
    if (idle || Clock::now() > deadline) return info;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void wait_healthy(const std::string& url, ooze::testing::Process& process) {
  ooze::serving::HttpClient client(url);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    try {
      if (client.send(get("/health")).ok()) return;
    } catch (const ooze::serving::HttpError&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw ooze::bench::BenchFailure("no answer on " + url + ":\n" + process.output());
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(q * (values.size() - 1))];
}

// One soak through `port`, with the server's usage before and after.
void soak_and_report(const std::string& target, uint16_t port, pid_t watched,
                     ooze::serving::HttpClient& engine_client, int connections, int requests,
                     int rounds) {
  // A warm-up at the same concurrency: the baseline then holds what serving 1,000 connections
  // at once takes (the allocator keeps freed memory for reuse), and what stays beyond it is
  // what the soak left.
  Soak(port, connections, std::min(requests, 2 * connections)).run();
  quiesced_stats(engine_client);
  const ProcessUsage before = usage_of(watched);

  SoakResult result = Soak(port, connections, requests).run();
  const nlohmann::json info = quiesced_stats(engine_client);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // closed sockets and threads wind down
  const ProcessUsage after = usage_of(watched);

  for (const auto& [kind, n] : result.outcomes) {
    std::fprintf(stderr, "serve_soak.%s: %s %lld\n", target.c_str(), kind.c_str(),
                 static_cast<long long>(n));
  }
  const std::string name = "serve_soak." + target;
  print_line(name + ".throughput", "requests_per_second", requests / result.seconds, "requests/s",
             std::nullopt, std::nullopt);
  print_line(name + ".latency_p50", "seconds", percentile(result.latencies, 0.5), "s", std::nullopt,
             std::nullopt);
  print_line(name + ".latency_p99", "seconds", percentile(result.latencies, 0.99), "s",
             std::nullopt, std::nullopt);
  print_line(name + ".errors", "count", static_cast<double>(result.errors()), "requests",
             static_cast<double>(requests), result.errors() / static_cast<double>(requests));
  print_line(name + ".fds", "count", after.fds, "fds", before.fds,
             after.fds / static_cast<double>(before.fds));
  print_line(name + ".threads", "count", after.threads, "threads", before.threads,
             after.threads / static_cast<double>(before.threads));
  print_line(name + ".rss", "megabytes", after.rss_kb / 1024.0, "MiB", before.rss_kb / 1024.0,
             after.rss_kb / static_cast<double>(before.rss_kb));
  // Free blocks include those the prefix cache keeps but no sequence holds.
  const int64_t total = info["stats"]["total_blocks"], free = info["stats"]["free_blocks"];
  print_line(name + ".kv_blocks_leaked", "count", static_cast<double>(total - free), "blocks",
             static_cast<double>(total), std::nullopt);

  if (rounds == 0) return;
  for (int round = 0; round < rounds; ++round) Soak(port, connections, requests).run();
  quiesced_stats(engine_client);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const ProcessUsage later = usage_of(watched);
  const double first_per_request = (after.rss_kb - before.rss_kb) * 1024.0 / requests;
  const double later_per_request =
      (later.rss_kb - after.rss_kb) * 1024.0 / (static_cast<double>(rounds) * requests);
  std::fprintf(stderr, "serve_soak.%s: RSS %.1f MiB after %d more soaks\n", target.c_str(),
               later.rss_kb / 1024.0, rounds);
  print_line(name + ".rss_growth_per_request", "bytes", later_per_request, "bytes/request",
             first_per_request, later_per_request / std::max(first_per_request, 1e-9));
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  int connections = 1000, requests = 20000, rounds = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--connections") {
      connections = std::stoi(argv[i + 1]);
    } else if (flag == "--requests") {
      requests = std::stoi(argv[i + 1]);
    } else if (flag == "--rounds") {
      rounds = std::stoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "bench_serve_soak_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  // This client holds `connections` sockets at once.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);

  try {
    namespace testing = ooze::testing;
    testing::TinyModelShape shape;
    const std::string model = testing::tiny_model_dir(shape);
    const std::string dir = testing::make_temp_dir("serve-soak");
    const int serve_port = testing::pick_free_port(), router_port = testing::pick_free_port();
    const std::string serve_url = "http://127.0.0.1:" + std::to_string(serve_port);
    const std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", "1"}};
    testing::Process serve(
        {testing::ooze_binary(), "serve", "--model", model, "--port", std::to_string(serve_port),
         "--max-running-requests", "64", "--kv-cache-blocks", "4096", "--block-size", "16"},
        env, dir + "/serve.log");
    wait_healthy(serve_url, serve);
    testing::Process router({testing::ooze_binary(), "router", "--engine", serve_url, "--port",
                             std::to_string(router_port)},
                            env, dir + "/router.log");
    wait_healthy("http://127.0.0.1:" + std::to_string(router_port), router);

    ooze::serving::HttpClient engine_client(serve_url);
    soak_and_report("serve", static_cast<uint16_t>(serve_port), serve.pid(), engine_client,
                    connections, requests, rounds);
    soak_and_report("router", static_cast<uint16_t>(router_port), router.pid(), engine_client,
                    connections, requests, rounds);
    std::filesystem::remove_all(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_serve_soak_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
