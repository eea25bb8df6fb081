#include "launcher/serve_command.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "core/error.h"
#include "engine/engine.h"
#include "launcher/commands.h"
#include "launcher/slime_flags.h"
#include "serving/engine_server.h"

namespace ooze::launcher {
namespace {

ConfigSchema build_serve_schema() {
  ConfigSchema schema;
  schema.section("serve");
  schema.add_string("host", "127.0.0.1", "Address to listen on (0.0.0.0: every interface).");
  schema.add_int("port", 30000, "Port to listen on (0: any free port).").min(0).max(65535);
  schema.add_string("api_key", "",
                    "Clients must send 'Authorization: Bearer KEY' (all paths but GET /health).");
  schema.add_int("http_threads", 2, "Threads parsing and writing HTTP.").min(1).max(64);
  schema.add_int("max_body_mb", 64, "Largest request body accepted (413 above).").min(1);
  schema
      .add_double("shutdown_grace_s", 5.0,
                  "On SIGINT/SIGTERM, seconds to write out the answers of aborted requests.")
      .min(0);
  engine::EngineOptions::fields().declare(schema);
  add_sglang_server_flags(schema);
  return schema;
}

}  // namespace

const ConfigSchema& serve_schema() {
  static const ConfigSchema schema = build_serve_schema();
  return schema;
}

int run_serve_command(const std::vector<std::string>& args) {
  const std::optional<Config> config = load_config_from_command_line(serve_schema(), args);
  if (!config) {
    std::cout << command_help("serve");
    return 0;
  }
  const engine::EngineOptions engine_options = engine::EngineOptions::fields().read(*config);

  serving::ServerOptions server_options;
  server_options.host = config->get<std::string>("host");
  server_options.port = static_cast<uint16_t>(config->get<int64_t>("port"));
  server_options.api_key = config->get<std::string>("api_key");
  server_options.threads = static_cast<int>(config->get<int64_t>("http_threads"));
  server_options.max_body_bytes = static_cast<size_t>(config->get<int64_t>("max_body_mb")) << 20;
  const auto grace = std::chrono::milliseconds(
      static_cast<int64_t>(config->get<double>("shutdown_grace_s") * 1000));

  // Block the stop signals before any thread starts: every thread inherits the mask, and
  // sigwait below is the one place that receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  engine::Engine engine(engine_options);
  serving::EngineServer server(engine, server_options);
  const engine::EngineInfo& info = engine.info();
  char kv_cache_mb[32];
  std::snprintf(kv_cache_mb, sizeof(kv_cache_mb), "%.1f",
                static_cast<double>(info.kv_cache_bytes) / (1 << 20));
  std::cout << "ooze serve: " << info.served_model_name << " (" << info.dtype << ", " << info.device
            << ", context " << info.context_length << ")\n"
            << "ooze serve: KV cache " << kv_cache_mb << " MB, " << info.num_blocks << " blocks of "
            << info.block_size << " tokens: " << info.kv_cache_sizing
            << (info.device == "cpu" ? " (its pages become resident as blocks are used)" : "")
            << "\n"
            << "ooze serve: listening on " << server.url() << std::endl;

  int signal = 0;
  sigwait(&stop_signals, &signal);
  std::cout << "ooze serve: " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
            << ": stopping (aborting requests in flight)" << std::endl;
  // Stop listening first, then abort what runs, so every client gets its (partial) answer while
  // the server drains; abort again until the drain ends, for requests that slipped in between.
  std::thread stopper([&] { server.stop(grace); });
  const auto deadline = std::chrono::steady_clock::now() + grace;
  do {
    engine.abort_all();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (server.requests_in_flight() > 0 && std::chrono::steady_clock::now() < deadline);
  stopper.join();
  std::cout << "ooze serve: stopped" << std::endl;
  return 0;
}

}  // namespace ooze::launcher
