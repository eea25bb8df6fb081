#include "core/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/error.h"

namespace ooze {
namespace {

const char* const kReservedKeys[] = {"step", "wall_time", "elapsed"};

}  // namespace

MetricsSink::MetricsSink(const std::string& path)
    : path_(path), start_(std::chrono::steady_clock::now()) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code error;
    std::filesystem::create_directories(parent, error);
    if (error) {
      throw IoError("cannot create directory '" + parent.string() +
                    "' for metrics: " + error.message());
    }
  }
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    throw IoError("cannot open metrics file '" + path + "': " + std::strerror(errno));
  }
}

MetricsSink::~MetricsSink() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsSink::log(int64_t step, const std::map<std::string, double>& metrics) {
  nlohmann::json object = nlohmann::json::object();
  for (const auto& [name, value] : metrics) {
    object[name] = std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
  }
  log_object(step, object);
}

void MetricsSink::log_object(int64_t step, const nlohmann::json& metrics) {
  if (!metrics.is_object()) {
    throw Error("MetricsSink::log: metrics must be a JSON object, got " +
                std::string(metrics.type_name()));
  }
  for (const char* key : kReservedKeys) {
    if (metrics.contains(key)) {
      throw Error(std::string("MetricsSink::log: metric name '") + key +
                  "' is reserved (step, wall_time and elapsed are written by the sink)");
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // Taken under the lock so that times never go backwards from one line to the next.
  double wall_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Ordered so that every line starts with step, wall_time, elapsed; nlohmann writes any
  // non-finite float nested in `metrics` as null.
  nlohmann::ordered_json line;
  line["step"] = step;
  line["wall_time"] = wall_time;
  line["elapsed"] = elapsed;
  for (const auto& [name, value] : metrics.items()) line[name] = value;
  std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    throw IoError("cannot write metrics file '" + path_ + "': " + std::strerror(errno));
  }
}

int64_t MetricsSink::drop_steps_from(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ifstream in(path_, std::ios::binary);
  std::string kept, line;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    // A line without its newline at the end of the file was cut short by a crash.
    const bool whole = !in.eof();
    const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool earlier = whole && parsed.is_object() && parsed.contains("step") &&
                         parsed["step"].is_number_integer() && parsed["step"].get<int64_t>() < step;
    if (earlier) {
      kept += line + "\n";
    } else {
      ++dropped;
    }
  }
  if (dropped == 0) return 0;
  std::fclose(file_);
  file_ = nullptr;
  write_file_atomically(path_, kept);
  file_ = std::fopen(path_.c_str(), "a");
  if (file_ == nullptr) {
    throw IoError("cannot open metrics file '" + path_ + "': " + std::strerror(errno));
  }
  return dropped;
}

void MetricsSink::sync() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) {
    throw IoError("cannot write metrics file '" + path_ + "': " + std::strerror(errno));
  }
}

}  // namespace ooze
