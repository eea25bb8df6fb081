#include "core/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/file_size_limit.h"
#include "tests/support/process.h"

namespace ooze {
namespace atomic_file_test {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Bytes that are not all alike, so a misplaced or dropped block shows.
std::string pattern(size_t size, char seed) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(seed + i * 7 + i / 4096);
  return bytes;
}

using ::ooze::testing::FileSizeLimit;

class AtomicFileTest : public ::testing::Test {
 protected:
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Every name in the directory, temporaries included.
  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }

  template <typename Body>
  std::string io_error_of(Body body) {
    return testing::error_message_of<IoError>(body);
  }

  std::string dir_ = testing::make_temp_dir("atomic_file");
};

TEST_F(AtomicFileTest, ReplacesTheContentWhole) {
  const std::string target = path("state.json");
  write_file_atomically(target, pattern(300000, 'a'));  // longer than what replaces it
  write_file_atomically(target, "short\n");
  EXPECT_EQ(read_file(target), "short\n");
  EXPECT_EQ(entries(), std::set<std::string>{"state.json"});
}

TEST_F(AtomicFileTest, StreamedPiecesArriveInOrder) {
  // Small writes are buffered, large ones bypass the buffer; the two must not reorder.
  const std::string big = pattern(1 << 20, 'x');
  const std::string small = pattern(100, 's');
  AtomicFile file(path("shard.bin"));
  file.write(small);
  file.stream() << "header " << 42 << "\n";
  file.write(big.data(), big.size());
  file.stream() << "trailer";
  file.write(small);
  file.commit();
  EXPECT_EQ(read_file(path("shard.bin")), small + "header 42\n" + big + "trailer" + small);
}

TEST_F(AtomicFileTest, TheCommittedEntryIsCompleteAndAlone) {
  const std::string content = pattern(200000, 'c');
  {
    AtomicFile file(path("model.safetensors"));
    file.write(content);
    // Before commit the destination does not exist; only the temporary does.
    EXPECT_FALSE(fs::exists(path("model.safetensors")));
    EXPECT_EQ(entries().size(), 1u);
    file.commit();
  }
  EXPECT_EQ(entries(), std::set<std::string>{"model.safetensors"});
  EXPECT_EQ(fs::file_size(path("model.safetensors")), content.size());
  EXPECT_EQ(read_file(path("model.safetensors")), content);
}

TEST_F(AtomicFileTest, AnExceptionInTheWriterLeavesTheOldFileAndNoTemporary) {
  const std::string target = path("config.json");
  write_file_atomically(target, "old\n");
  EXPECT_THROW(write_file_atomically(target,
                                     [](std::ostream& out) {
                                       out << pattern(500000, 'n');  // partly on disk already
                                       throw std::runtime_error("the writer failed");
                                     }),
               std::runtime_error);
  EXPECT_EQ(read_file(target), "old\n");
  EXPECT_EQ(entries(), std::set<std::string>{"config.json"});
}

TEST_F(AtomicFileTest, AnUncommittedFileIsDiscarded) {
  {
    AtomicFile file(path("never.bin"));
    file.write(pattern(100000, 'u'));
  }
  EXPECT_TRUE(entries().empty());
}

TEST_F(AtomicFileTest, AMissingDirectoryFailsNamingThePath) {
  const std::string target = path("missing/config.json");
  std::string message = io_error_of([&] { write_file_atomically(target, "{}"); });
  EXPECT_CONTAINS(message, "'" + target + "'");
  EXPECT_CONTAINS(message, std::strerror(ENOENT));
}

TEST_F(AtomicFileTest, APathUnderARegularFileFailsNamingThePath) {
  write_file_atomically(path("file"), "a regular file\n");
  const std::string target = path("file/child");
  std::string message = io_error_of([&] { AtomicFile file(target); });
  EXPECT_CONTAINS(message, "'" + target + "'");
  EXPECT_CONTAINS(message, std::strerror(ENOTDIR));
  EXPECT_EQ(read_file(path("file")), "a regular file\n");
}

TEST_F(AtomicFileTest, AReadOnlyDirectoryFailsNamingThePath) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories anyway";
  fs::create_directory(path("locked"));
  fs::permissions(path("locked"), fs::perms::owner_read | fs::perms::owner_exec);
  const std::string target = path("locked/config.json");
  std::string message = io_error_of([&] { write_file_atomically(target, "{}"); });
  fs::permissions(path("locked"), fs::perms::owner_all);
  EXPECT_CONTAINS(message, "'" + target + "'");
  EXPECT_CONTAINS(message, std::strerror(EACCES));
}

TEST_F(AtomicFileTest, AFailedWriteKeepsTheOldFileAndNamesTheOsError) {
  const std::string target = path("optim.safetensors");
  write_file_atomically(target, "old");
  std::string message;
  {
    FileSizeLimit limit(64 * 1024);
    message = io_error_of([&] {
      AtomicFile file(target);
      const std::string big = pattern(1 << 20, 'b');
      file.write(big.data(), big.size());
      file.commit();
    });
  }
  EXPECT_CONTAINS(message, "'" + target + "'");
  EXPECT_CONTAINS(message, std::strerror(EFBIG));
  EXPECT_EQ(read_file(target), "old");
  EXPECT_EQ(entries(), std::set<std::string>{"optim.safetensors"});
}

// A writer that knows its size reserves it first: a full disk then fails before any byte is
// written, and the message says how many bytes the file needed and how many are free.
TEST_F(AtomicFileTest, AReservationThatDoesNotFitFailsAtOnceNamingTheBytes) {
  const std::string target = path("model.safetensors");
  write_file_atomically(target, "old");
  std::string message;
  {
    FileSizeLimit limit(64 * 1024);
    message = io_error_of([&] {
      AtomicFile file(target);
      file.reserve(1 << 20);
      ADD_FAILURE() << "reserved past the file-size limit";
    });
  }
  EXPECT_CONTAINS(message, "'" + target + "': reserving its space failed");
  EXPECT_CONTAINS(message, std::strerror(EFBIG));
  EXPECT_CONTAINS(message, "(the file needs 1048576 bytes, ");
  EXPECT_CONTAINS(message, " bytes free on its filesystem)");
  EXPECT_EQ(read_file(target), "old");
  EXPECT_EQ(entries(), std::set<std::string>{"model.safetensors"});

  // Within the limit the reservation holds the file's size, and the written file is exact.
  AtomicFile file(target);
  file.reserve(5);
  file.write("new!!");
  file.commit();
  EXPECT_EQ(read_file(target), "new!!");
}

TEST_F(AtomicFileTest, AFailedStreamWriteIsReportedByCommit) {
  const std::string target = path("metadata.json");
  write_file_atomically(target, "old");
  std::string message;
  {
    FileSizeLimit limit(64 * 1024);
    message = io_error_of([&] {
      write_file_atomically(target, [](std::ostream& out) { out << pattern(1 << 20, 'm'); });
    });
  }
  EXPECT_CONTAINS(message, "'" + target + "'");
  EXPECT_CONTAINS(message, std::strerror(EFBIG));
  EXPECT_EQ(read_file(target), "old");
  EXPECT_EQ(entries(), std::set<std::string>{"metadata.json"});
}

TEST_F(AtomicFileTest, ConcurrentWritersOfOnePathNeverMixTheirBytes) {
  const std::string target = path("latest");
  std::vector<std::string> contents;
  for (char c = 'a'; c < 'a' + 4; ++c) contents.push_back(pattern(150000, c));
  std::vector<std::thread> writers;
  for (const std::string& content : contents) {
    writers.emplace_back([&target, &content] {
      for (int i = 0; i < 3; ++i) write_file_atomically(target, content);
    });
  }
  for (std::thread& writer : writers) writer.join();
  const std::string result = read_file(target);
  EXPECT_NE(std::find(contents.begin(), contents.end(), result), contents.end())
      << "the file is not exactly one writer's content (" << result.size() << " bytes)";
  EXPECT_EQ(entries(), std::set<std::string>{"latest"});
}

TEST_F(AtomicFileTest, CommitTwiceIsAnError) {
  AtomicFile file(path("once"));
  file.write("x");
  file.commit();
  EXPECT_THROW(file.commit(), IoError);
  EXPECT_THROW(file.write("y"), IoError);
  EXPECT_EQ(read_file(path("once")), "x");
}

TEST_F(AtomicFileTest, TheModeIsApplied) {
  AtomicFile file(path("token"), 0600);
  file.write("secret\n");
  file.commit();
  struct stat status {};
  ASSERT_EQ(::stat(path("token").c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0600u);
}

}  // namespace atomic_file_test
}  // namespace ooze
