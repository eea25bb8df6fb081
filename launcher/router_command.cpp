#include "launcher/router_command.h"

#include <signal.h>

#include <iostream>

#include "core/config.h"
#include "core/error.h"
#include "launcher/commands.h"
#include "serving/router_server.h"

namespace ooze::launcher {

namespace {

ConfigSchema build_router_schema() {
  const serving::RouterOptions defaults;
  ConfigSchema schema;
  schema.section("router");
  schema
      .add_string_list("engine", {},
                       "An engine server (ooze serve), e.g. http://127.0.0.1:30000; repeat the "
                       "flag (or separate URLs with commas) for several.")
      .repeatable();
  schema.add_string("host", "127.0.0.1", "Address the router listens on (0.0.0.0: every one).");
  schema.add_int("port", 30001, "Port the router listens on (0: any free port).").min(0).max(65535);
  schema.add_string("api_key", "", "Clients must send \"Authorization: Bearer KEY\".");
  schema.add_string("engine_api_key", "", "Sent to the engines (their --api-key).");
  schema
      .add_double("health_check_interval_s", defaults.health_check_interval_s,
                  "Seconds between GET /health checks of every engine.")
      .greater_than(0);
  schema
      .add_double("request_timeout_s", defaults.request_timeout_s,
                  "Longest wait for an engine's answer (for a stream, between events).")
      .greater_than(0);
  schema.add_bool("retry_on_engine_failure", false,
                  "Send a request whose engine failed before answering to another engine.");
  schema.add_check("engines", [](const Config& c) -> std::string {
    if (!c.get<std::vector<std::string>>("engine").empty()) return "";
    return "give at least one --engine URL";
  });
  return schema;
}

}  // namespace

const ConfigSchema& router_schema() {
  static const ConfigSchema schema = build_router_schema();
  return schema;
}

int run_router_command(const std::vector<std::string>& args) {
  const std::optional<Config> config = load_config_from_command_line(router_schema(), args);
  if (!config) {
    std::cout << command_help("router");
    return 0;
  }
  serving::RouterServerOptions options;
  options.router.engine_urls = config->get<std::vector<std::string>>("engine");
  options.server.host = config->get<std::string>("host");
  options.server.port = static_cast<uint16_t>(config->get<int64_t>("port"));
  options.server.api_key = config->get<std::string>("api_key");
  options.router.engine_api_key = config->get<std::string>("engine_api_key");
  options.router.health_check_interval_s = config->get<double>("health_check_interval_s");
  options.router.request_timeout_s = config->get<double>("request_timeout_s");
  options.retry_on_engine_failure = config->get<bool>("retry_on_engine_failure");

  // Block the stop signals before any thread starts, so every thread inherits the mask and
  // sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  serving::RouterServer server(options);
  std::cout << "ooze router listening on " << server.url() << "\n";
  for (const serving::EngineStatus& engine : server.router().engines()) {
    std::cout << "  engine " << engine.url
              << (engine.alive ? " (alive)" : " (not answering yet: " + engine.last_error + ")")
              << "\n";
  }
  std::cout << std::flush;
  int signal = 0;
  sigwait(&stop_signals, &signal);
  std::cout << "ooze router: stopping\n" << std::flush;
  return 0;
}

}  // namespace ooze::launcher
