// TensorBoard event files read back by an independent reader: tensorboard_event_reader.py
// decodes the TFRecord framing, both masked CRC-32Cs and the protobuf wire format by hand
// (no shared code or .proto). CRC-32C itself is checked against published check values.
#include "core/tensorboard_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/checksum.h"
#include "core/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze {
namespace tensorboard_writer_test {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

const char* const kPython = "/usr/bin/python3";

uint32_t crc32c_of(const std::string& text) { return crc32c(text.data(), text.size()); }

// What the reader printed: one JSON object per record, or its complaint and exit status.
struct ReadBack {
  bool ok = false;
  std::string output;
  std::vector<json> records;
};

ReadBack read_events(const std::vector<std::string>& files, const std::string& log_path) {
  std::vector<std::string> argv = {
      kPython, (fs::path(__FILE__).parent_path() / "tensorboard_event_reader.py").string()};
  argv.insert(argv.end(), files.begin(), files.end());
  ::ooze::testing::Process reader(argv, {}, log_path);
  const ::ooze::testing::ExitStatus status = reader.wait(60s);
  ReadBack result;
  result.ok = status.exited && status.code == 0;
  result.output = reader.output();
  std::istringstream lines(result.output);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') result.records.push_back(json::parse(line));
  }
  return result;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

double as_float32(double value) { return static_cast<double>(static_cast<float>(value)); }

class TensorBoardWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kPython)) GTEST_SKIP() << "no " << kPython << " for the independent reader";
    dir_ = ::ooze::testing::make_temp_dir("tensorboard");
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }
  std::string dir_;
};

TEST(Crc32cTest, MatchesPublishedCheckValues) {
  EXPECT_EQ(crc32c_of("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c_of(""), 0u);
  // RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(crc32c_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c_of(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc32c_of(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c_of(descending), 0x113FDB5Cu);
  // Continued over a split, the CRC is that of the whole.
  const uint32_t first = crc32c("1234", 4);
  EXPECT_EQ(crc32c("56789", 5, first), 0xE3069283u);
}

TEST(Crc32cTest, MaskRotatesRightBy15AndAddsTheConstant) {
  EXPECT_EQ(mask_crc32c(0), 0xA282EAD8u);
  EXPECT_EQ(mask_crc32c(0x00008000u), 0xA282EAD8u + 1);        // bit 15 rotates to bit 0
  EXPECT_EQ(mask_crc32c(0x00000001u), 0xA282EAD8u + 0x20000);  // bit 0 rotates to bit 17
  EXPECT_EQ(mask_crc32c(0xFFFFFFFFu), 0xA282EAD8u - 1);        // wraps modulo 2^32
}

TEST_F(TensorBoardWriterTest, NamesItsFileAsTensorBoardExpectsAndNeverReusesOne) {
  const auto before = static_cast<long long>(TensorBoardWriter::unix_time_now());
  TensorBoardWriter first(dir_ + "/tb");
  TensorBoardWriter second(dir_ + "/tb");
  const auto after = static_cast<long long>(TensorBoardWriter::unix_time_now());
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  const std::regex pattern(R"(events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.(\d+))");
  std::set<std::string> names;
  for (const TensorBoardWriter* writer : {&first, &second}) {
    EXPECT_EQ(fs::path(writer->path()).parent_path(), fs::path(dir_ + "/tb"));
    const std::string name = fs::path(writer->path()).filename().string();
    std::smatch match;
    ASSERT_TRUE(std::regex_match(name, match, pattern)) << name;
    EXPECT_GE(std::stoll(match[1]), before);
    EXPECT_LE(std::stoll(match[1]), after);
    EXPECT_EQ(match[2], std::string(host));
    EXPECT_EQ(std::stoll(match[3]), static_cast<long long>(::getpid()));
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 2u);
  EXPECT_EQ(event_files(dir_ + "/tb").size(), 2u);
}

TEST_F(TensorBoardWriterTest, ScalarsAndTextReadBackIndependentlyAcrossAResume) {
  const std::string tb = dir_ + "/tb";
  const double base = 1712345678.25;
  const double opened = TensorBoardWriter::unix_time_now();
  std::string first_file;
  {
    TensorBoardWriter writer(tb);
    first_file = writer.path();
    writer.add_text(0, "config", "lr: 1e-6\nbatch: 32");
    writer.add_scalars(0, {{"rollout/raw_reward", 0.1}, {"train/pg_loss", -0.25}}, base);
    writer.add_scalars(1, {{"rollout/raw_reward", 0.4}, {"train/pg_loss", 1.0 / 3}}, base + 1.5);
    writer.add_scalars(2, {{"rollout/raw_reward", 0.75}}, base + 3);
    writer.flush();
  }
  const std::string first_content = read_file(first_file);
  // A resumed run: a new writer adds a second file and leaves the first as it was.
  {
    TensorBoardWriter writer(tb);
    EXPECT_NE(writer.path(), first_file);
    writer.add_scalars(3, {{"rollout/raw_reward", 0.5}, {"eval/gsm8k", 0.625}}, base + 4);
    writer.add_scalars(int64_t{1} << 40, {{"perf/train_time", 12345.678}}, base + 5);
  }
  const double closed = TensorBoardWriter::unix_time_now();
  EXPECT_EQ(read_file(first_file), first_content);

  const std::vector<std::string> files = event_files(tb);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], first_file);  // name order is creation order
  const ReadBack read = read_events(files, dir_ + "/reader.txt");
  ASSERT_TRUE(read.ok) << read.output;
  ASSERT_EQ(read.records.size(), 8u) << read.output;

  // Each file starts with its version record, stamped when the writer opened it.
  for (int index : {0, 5}) {
    const json& version = read.records[index];
    EXPECT_EQ(version["record"], 0);
    EXPECT_EQ(version["file_version"], "brain.Event:2");
    EXPECT_EQ(version["step"], 0);
    EXPECT_FALSE(version.contains("values"));
    EXPECT_GE(version["wall_time"].get<double>(), opened - 1);
    EXPECT_LE(version["wall_time"].get<double>(), closed + 1);
  }
  EXPECT_EQ(read.records[5]["file"], fs::path(files[1]).filename().string());

  const json& text = read.records[1];
  EXPECT_EQ(text["step"], 0);
  ASSERT_EQ(text["values"].size(), 1u);
  EXPECT_EQ(text["values"][0]["tag"], "config");
  EXPECT_EQ(text["values"][0]["plugin"], "text");
  EXPECT_EQ(text["values"][0]["dtype"], 7);  // DT_STRING
  EXPECT_EQ(text["values"][0]["rank"], 0);
  EXPECT_EQ(text["values"][0]["strings"], json::array({"lr: 1e-6\nbatch: 32"}));

  // step, wall time, and (tag, float32 value) in name order, as written.
  struct Expected {
    int record;
    int64_t step;
    double wall_time;
    std::vector<std::pair<std::string, double>> values;
  };
  const std::vector<Expected> expected = {
      {2, 0, base, {{"rollout/raw_reward", 0.1}, {"train/pg_loss", -0.25}}},
      {3, 1, base + 1.5, {{"rollout/raw_reward", 0.4}, {"train/pg_loss", 1.0 / 3}}},
      {4, 2, base + 3, {{"rollout/raw_reward", 0.75}}},
      {6, 3, base + 4, {{"eval/gsm8k", 0.625}, {"rollout/raw_reward", 0.5}}},
      {7, int64_t{1} << 40, base + 5, {{"perf/train_time", 12345.678}}},
  };
  for (const Expected& e : expected) {
    const json& record = read.records[e.record];
    SCOPED_TRACE(record.dump());
    EXPECT_EQ(record["step"].get<int64_t>(), e.step);
    EXPECT_EQ(record["wall_time"].get<double>(), e.wall_time);
    ASSERT_EQ(record["values"].size(), e.values.size());
    for (size_t i = 0; i < e.values.size(); ++i) {
      EXPECT_EQ(record["values"][i]["tag"], e.values[i].first);
      EXPECT_EQ(record["values"][i]["simple_value"].get<double>(), as_float32(e.values[i].second));
    }
  }
  // float32 really is what is stored: 0.1 is not exactly representable in it.
  EXPECT_NE(read.records[2]["values"][0]["simple_value"].get<double>(), 0.1);
}

TEST_F(TensorBoardWriterTest, DroppedEventsLeaveTheOtherFilesAndRecordsReadable) {
  const std::string tb = dir_ + "/tb";
  std::string killed_file, other_file;
  {
    // A run killed during rollout 2: train lines at optimizer steps 1..3, rollouts 0..1, and
    // half a record at the end.
    TensorBoardWriter writer(tb);
    killed_file = writer.path();
    writer.add_text(0, "config", "lr: 1e-6");
    writer.add_scalars(1, {{"train/step", 1}, {"train/loss", 0.5}});
    writer.add_scalars(0, {{"rollout/raw_reward", 0.1}});
    writer.add_scalars(2, {{"train/step", 2}, {"train/loss", 0.4}});
    writer.add_scalars(1, {{"rollout/raw_reward", 0.2}});
    writer.add_scalars(3, {{"train/step", 3}, {"train/loss", 0.3}});
  }
  {
    std::ofstream torn(killed_file, std::ios::binary | std::ios::app);
    torn << std::string("\x30\x00\x00\x00\x00\x00\x00\x00\x01\x02", 10);
  }
  // A file with nothing to drop is left as it was, byte for byte.
  {
    TensorBoardWriter writer(tb);
    other_file = writer.path();
    writer.add_scalars(0, {{"eval/score", 0.75}});
  }
  const std::string other_content = read_file(other_file);
  TensorBoardWriter resumed(tb);
  // Resumed at rollout 1 after 2 optimizer steps: train step 3 and rollout 1 go, with the tail;
  // the eval line at rollout 0 stays.
  const int64_t dropped = drop_tensorboard_events(
      tb, resumed.path(), [](int64_t step, const std::vector<std::string>& tags) {
        const bool train = std::find(tags.begin(), tags.end(), "train/step") != tags.end();
        return train ? step > 2 : step >= 1;
      });
  EXPECT_EQ(dropped, 2);
  EXPECT_EQ(read_file(other_file), other_content);
  const ReadBack read = read_events({killed_file}, dir_ + "/reader.txt");
  ASSERT_TRUE(read.ok) << read.output;
  std::vector<std::pair<int64_t, std::string>> kept;
  for (const json& record : read.records) {
    kept.push_back(
        {record["step"].get<int64_t>(), record.contains("file_version")
                                            ? "version"
                                            : record["values"].back()["tag"].get<std::string>()});
  }
  const std::vector<std::pair<int64_t, std::string>> expected = {{0, "version"},
                                                                 {0, "config"},
                                                                 {1, "train/step"},
                                                                 {0, "rollout/raw_reward"},
                                                                 {2, "train/step"}};
  EXPECT_EQ(kept, expected);
  // Nothing more to drop: a second pass changes nothing.
  EXPECT_EQ(drop_tensorboard_events(tb, resumed.path(),
                                    [](int64_t, const std::vector<std::string>&) { return false; }),
            0);
}

TEST_F(TensorBoardWriterTest, TheReaderDetectsACorruptedByte) {
  std::string path;
  {
    TensorBoardWriter writer(dir_ + "/tb");
    path = writer.path();
    writer.add_scalars(7, {{"train/grad_norm", 2.5}}, 1000.0);
  }
  const std::string good = read_file(path);
  ASSERT_TRUE(read_events({path}, dir_ + "/good.txt").ok);
  // A record is 8 bytes of length, 4 of its CRC, the event, 4 of the event's CRC. The first
  // record's length tells where the second (the scalar event) starts.
  uint64_t first_length = 0;
  for (int i = 7; i >= 0; --i) first_length = (first_length << 8) | static_cast<uint8_t>(good[i]);
  const size_t second = 12 + first_length + 4;
  ASSERT_LT(second + 12, good.size());
  struct Corruption {
    size_t offset;
    std::string complaint;
  };
  const std::string at_second = "record 1 (offset " + std::to_string(second) + "): ";
  const Corruption corruptions[] = {
      {second + 2, at_second + "length CRC mismatch"},     // its length
      {second + 9, at_second + "length CRC mismatch"},     // the length's CRC
      {second + 12 + 3, at_second + "data CRC mismatch"},  // inside the event
      {good.size() - 1, at_second + "data CRC mismatch"},  // the event's CRC
      {5, "record 0 (offset 0): length CRC mismatch"},     // the first record's length
  };
  for (const Corruption& corruption : corruptions) {
    std::string bad = good;
    bad[corruption.offset] = static_cast<char>(bad[corruption.offset] ^ 0x10);
    const std::string bad_path = dir_ + "/bad.tfevents";
    std::ofstream(bad_path, std::ios::binary) << bad;
    const ReadBack read = read_events({bad_path}, dir_ + "/bad.txt");
    EXPECT_FALSE(read.ok) << "flipped byte " << corruption.offset << " went unnoticed";
    EXPECT_CONTAINS(read.output, corruption.complaint);
  }
}

TEST_F(TensorBoardWriterTest, NonFiniteValuesAreKeptAndHugeOnesSaturate) {
  std::string path;
  {
    TensorBoardWriter writer(dir_ + "/tb");
    path = writer.path();
    writer.add_scalars(1,
                       {{"a/nan", std::nan("")},
                        {"b/inf", std::numeric_limits<double>::infinity()},
                        {"c/minus_inf", -std::numeric_limits<double>::infinity()},
                        {"d/huge", 1e300},
                        {"e/minus_huge", -1e300},
                        {"f/tiny", 1e-300}},
                       5.0);
  }
  const ReadBack read = read_events({path}, dir_ + "/reader.txt");
  ASSERT_TRUE(read.ok) << read.output;
  ASSERT_EQ(read.records.size(), 2u);
  const json& values = read.records[1]["values"];
  ASSERT_EQ(values.size(), 6u);
  EXPECT_EQ(values[0]["simple_value"], "nan");
  EXPECT_EQ(values[1]["simple_value"], "inf");
  EXPECT_EQ(values[2]["simple_value"], "-inf");
  EXPECT_EQ(values[3]["simple_value"], "inf");
  EXPECT_EQ(values[4]["simple_value"], "-inf");
  EXPECT_EQ(values[5]["simple_value"].get<double>(), 0.0);  // below float32's smallest
}

TEST_F(TensorBoardWriterTest, RecordsFromConcurrentThreadsStayWhole) {
  constexpr int kThreads = 4;
  constexpr int kSteps = 50;
  std::string path;
  {
    TensorBoardWriter writer(dir_ + "/tb");
    path = writer.path();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&writer, t] {
        const std::string tag = "thread/" + std::to_string(t);
        for (int step = 0; step < kSteps; ++step) {
          writer.add_scalars(step, {{tag, step * 0.5}, {tag + "/padding", 1.0 * t}});
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  const ReadBack read = read_events({path}, dir_ + "/reader.txt");
  ASSERT_TRUE(read.ok) << read.output.substr(0, 2000);
  ASSERT_EQ(read.records.size(), 1u + kThreads * kSteps);
  std::map<std::string, std::set<int64_t>> steps_by_tag;
  for (size_t i = 1; i < read.records.size(); ++i) {
    const json& values = read.records[i]["values"];
    ASSERT_EQ(values.size(), 2u);
    const int64_t step = read.records[i]["step"];
    EXPECT_EQ(values[0]["simple_value"].get<double>(), step * 0.5);
    steps_by_tag[values[0]["tag"]].insert(step);
  }
  ASSERT_EQ(steps_by_tag.size(), static_cast<size_t>(kThreads));
  for (const auto& [tag, steps] : steps_by_tag) EXPECT_EQ(steps.size(), size_t{kSteps}) << tag;
}

TEST_F(TensorBoardWriterTest, ErrorsSayWhatAndWhere) {
  const std::string blocker = dir_ + "/not_a_directory";
  std::ofstream(blocker) << "x";
  const std::string message = ::ooze::testing::error_message_of<IoError>(
      [&] { TensorBoardWriter writer(blocker + "/tb"); });
  EXPECT_CONTAINS(message, blocker + "/tb");
  EXPECT_CONTAINS(message, "cannot create TensorBoard directory");

  TensorBoardWriter writer(dir_ + "/tb");
  EXPECT_CONTAINS(::ooze::testing::error_message_of<Error>([&] {
                    writer.add_scalars(3, {{"", 1.0}});
                  }),
                  "empty name");
  EXPECT_CONTAINS(::ooze::testing::error_message_of<Error>([&] { writer.add_text(3, "", "x"); }),
                  "empty tag");
}

}  // namespace tensorboard_writer_test
}  // namespace ooze
