#include "core/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/atomic_file.h"
#include "core/checksum.h"
#include "core/error.h"
#include "core/proto/event.pb.h"

namespace ooze {
namespace {

// The version string TensorBoard expects in the first record of every event file.
constexpr const char* kFileVersion = "brain.Event:2";

// Writers made by this process so far: the last part of the file name, so two writers created
// in the same second by one process get different files.
std::atomic<int> writers_created{0};

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  std::string host(name);
  for (char& c : host) {
    if (c == '/') c = '_';  // would turn the file name into a path
  }
  return host;
}

void append_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

// TFRecord framing: length (uint64), masked CRC-32C of those 8 bytes, the data, masked CRC-32C
// of the data; every integer little-endian.
std::string frame_record(const std::string& data) {
  std::string record;
  record.reserve(data.size() + 16);
  append_little_endian(record, data.size(), 8);
  append_little_endian(record, mask_crc32c(crc32c(record.data(), 8)), 4);
  record += data;
  append_little_endian(record, mask_crc32c(crc32c(data.data(), data.size())), 4);
  return record;
}

// The records of an event file's bytes, up to the first one that is cut short or fails a check.
std::vector<std::string> read_records(const std::string& bytes) {
  auto little_endian = [&](size_t at, int width) {
    uint64_t value = 0;
    for (int i = width - 1; i >= 0; --i) {
      value = (value << 8) | static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)]);
    }
    return value;
  };
  std::vector<std::string> records;
  size_t at = 0;
  while (at + 16 <= bytes.size()) {  // length, its CRC, the data's CRC: 16 bytes at least
    const uint64_t length = little_endian(at, 8);
    if (little_endian(at + 8, 4) != mask_crc32c(crc32c(bytes.data() + at, 8))) break;
    if (length > bytes.size() - at - 16) break;
    const char* data = bytes.data() + at + 12;
    if (little_endian(at + 12 + length, 4) != mask_crc32c(crc32c(data, length))) break;
    records.emplace_back(data, length);
    at += 16 + length;
  }
  return records;
}

// float32, TensorBoard's scalar type; out-of-range finite values saturate to +-Inf explicitly
// (the plain conversion is undefined behaviour for them).
float to_float32(double value) {
  if (std::isfinite(value) && std::fabs(value) > std::numeric_limits<float>::max()) {
    return value > 0 ? std::numeric_limits<float>::infinity()
                     : -std::numeric_limits<float>::infinity();
  }
  return static_cast<float>(value);
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    throw IoError("cannot create TensorBoard directory '" + dir + "': " + error.message());
  }
  const long long seconds = static_cast<long long>(unix_time_now());
  const std::string prefix = (std::filesystem::path(dir) / "events.out.tfevents.").string();
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%010lld", seconds);
  const std::string stem =
      prefix + stamp + "." + host_name() + "." + std::to_string(::getpid()) + ".";
  // O_EXCL: an existing file (an earlier run, another process) is never opened, let alone
  // truncated; the next number is tried instead.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    path_ = stem + std::to_string(writers_created.fetch_add(1));
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ >= 0 || errno != EEXIST) break;
  }
  if (fd_ < 0) {
    throw IoError("cannot create TensorBoard event file '" + path_ + "': " + std::strerror(errno));
  }
  tensorboard::Event event;
  event.set_wall_time(unix_time_now());
  event.set_file_version(kFileVersion);
  try {
    write_event(event.SerializeAsString());
  } catch (...) {
    ::close(fd_);  // no destructor runs for an object whose constructor threw
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ < 0) return;
  ::fsync(fd_);
  ::close(fd_);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::map<std::string, double>& values,
                                    double wall_time) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [name, value] : values) {
    if (name.empty()) {
      throw Error("TensorBoardWriter::add_scalars: a metric at step " + std::to_string(step) +
                  " has an empty name; every value needs a tag such as 'train/pg_loss'");
    }
    tensorboard::Summary::Value* entry = summary->add_value();
    entry->set_tag(name);
    entry->set_simple_value(to_float32(value));
  }
  write_event(event.SerializeAsString());
}

void TensorBoardWriter::add_text(int64_t step, const std::string& tag, const std::string& text,
                                 double wall_time) {
  if (tag.empty()) {
    throw Error("TensorBoardWriter::add_text: empty tag at step " + std::to_string(step));
  }
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorboard::Summary::Value* entry = event.mutable_summary()->add_value();
  entry->set_tag(tag);
  // The text plugin claims string tensors whose metadata names it; a rank-0 tensor is one text.
  tensorboard::SummaryMetadata* metadata = entry->mutable_metadata();
  metadata->mutable_plugin_data()->set_plugin_name("text");
  metadata->set_data_class(tensorboard::DATA_CLASS_TENSOR);
  tensorboard::TensorProto* tensor = entry->mutable_tensor();
  tensor->set_dtype(tensorboard::DT_STRING);
  tensor->mutable_tensor_shape();
  tensor->add_string_val(text);
  write_event(event.SerializeAsString());
}

void TensorBoardWriter::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (::fsync(fd_) != 0) {
    throw IoError("cannot sync TensorBoard event file '" + path_ + "': " + std::strerror(errno));
  }
}

double TensorBoardWriter::unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void TensorBoardWriter::write_event(const std::string& serialized_event) {
  const std::string record = frame_record(serialized_event);
  std::lock_guard<std::mutex> lock(mutex_);
  if (torn_) {
    throw IoError("TensorBoard event file '" + path_ +
                  "' ends in a partly written record that could not be removed; open a new "
                  "TensorBoardWriter");
  }
  size_t written = 0;
  while (written < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + written, record.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n < 0 ? std::strerror(errno) : "nothing written";
      // Cut the partial record off so that the file stays readable and later records line up.
      torn_ = ::ftruncate(fd_, static_cast<off_t>(size_)) != 0 ||
              ::lseek(fd_, static_cast<off_t>(size_), SEEK_SET) < 0;
      throw IoError("cannot write TensorBoard event file '" + path_ + "': " + reason);
    }
    written += static_cast<size_t>(n);
  }
  size_ += record.size();
}

int64_t drop_tensorboard_events(
    const std::string& dir, const std::string& except,
    const std::function<bool(int64_t step, const std::vector<std::string>& tags)>& drop) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) return 0;
  int64_t dropped = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string path = entry.path().string();
    if (path == except || entry.path().filename().string().rfind("events.out.tfevents.", 0) != 0) {
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), {}};
    if (in.bad()) throw IoError("cannot read TensorBoard event file '" + path + "'");
    std::string kept;
    int64_t dropped_here = 0;
    for (const std::string& record : read_records(bytes)) {
      tensorboard::Event event;
      std::vector<std::string> tags;
      if (event.ParseFromString(record) && event.has_summary()) {
        for (const auto& value : event.summary().value()) tags.push_back(value.tag());
      }
      if (!tags.empty() && drop(event.step(), tags)) {
        ++dropped_here;
      } else {
        kept += frame_record(record);
      }
    }
    if (dropped_here == 0 && kept.size() == bytes.size()) continue;
    write_file_atomically(path, kept);
    dropped += dropped_here;
  }
  return dropped;
}

}  // namespace ooze
