#include "launcher/router_command.h"

#include <signal.h>

#include <iostream>

#include "core/error.h"
#include "serving/router_server.h"

namespace ooze::launcher {

namespace {

const char* kRouterUsage =
    "usage: ooze router --engine URL [--engine URL ...] [--host 127.0.0.1] [--port 30001]\n"
    "                   [--api-key KEY] [--engine-api-key KEY] [--health-check-interval-s 10]\n"
    "                   [--request-timeout-s 1800] [--retry-on-engine-failure]\n"
    "  --engine URL                an engine server (ooze serve), e.g. http://127.0.0.1:30000\n"
    "  --host, --port              where the router listens\n"
    "  --api-key KEY               clients must send \"Authorization: Bearer KEY\"\n"
    "  --engine-api-key KEY        sent to the engines (their --api-key)\n"
    "  --health-check-interval-s X seconds between GET /health checks of every engine\n"
    "  --request-timeout-s X       longest wait for an engine's answer (or between events)\n"
    "  --retry-on-engine-failure   send a request whose engine failed to another engine\n";

double parse_seconds(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && value > 0) return value;
  } catch (const std::exception&) {
  }
  throw ConfigError("ooze router: " + flag + " needs a positive number of seconds, got '" + text +
                    "'");
}

serving::RouterServerOptions parse_router_options(const std::vector<std::string>& args) {
  serving::RouterServerOptions options;
  options.server.port = 30001;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) {
        throw ConfigError("ooze router: " + flag + " needs a value\n" + kRouterUsage);
      }
      return args[++i];
    };
    if (flag == "--engine") {
      options.router.engine_urls.push_back(value());
    } else if (flag == "--host") {
      options.server.host = value();
    } else if (flag == "--port") {
      const std::string& text = value();
      int port = -1;
      try {
        size_t used = 0;
        port = std::stoi(text, &used);
        if (used != text.size()) port = -1;
      } catch (const std::exception&) {
      }
      if (port < 0 || port > 65535) {
        throw ConfigError("ooze router: --port needs a number in 0..65535, got '" + text + "'");
      }
      options.server.port = static_cast<uint16_t>(port);
    } else if (flag == "--api-key") {
      options.server.api_key = value();
    } else if (flag == "--engine-api-key") {
      options.router.engine_api_key = value();
    } else if (flag == "--health-check-interval-s") {
      options.router.health_check_interval_s = parse_seconds(flag, value());
    } else if (flag == "--request-timeout-s") {
      options.router.request_timeout_s = parse_seconds(flag, value());
    } else if (flag == "--retry-on-engine-failure") {
      options.retry_on_engine_failure = true;
    } else {
      throw ConfigError("ooze router: unknown argument '" + flag + "'\n" + kRouterUsage);
    }
  }
  if (options.router.engine_urls.empty()) {
    throw ConfigError("ooze router: give at least one --engine URL\n" + std::string(kRouterUsage));
  }
  return options;
}

}  // namespace

int run_router_command(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      std::cout << kRouterUsage;
      return 0;
    }
  }
  const serving::RouterServerOptions options = parse_router_options(args);

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
