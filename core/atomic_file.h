// Replacing a file whole or not at all: the one way ooze writes files that must survive a crash
// (configs, checkpoints, safetensors shards, trackers).
//
// The bytes go to a temporary sibling "<path>.tmp.<pid>.<n>"; commit() flushes it, fsyncs it,
// renames it over `path` and fsyncs the directory. Until commit() returns, `path` holds its old
// content (or does not exist); afterwards the complete new content, even across a power loss.
// An AtomicFile destroyed without commit() (say, the writer threw) removes its temporary.
//
//   write_file_atomically(dir + "/config.json", json.dump(2) + "\n");
//
//   AtomicFile file(path);  // large content, streamed piece by piece
//   for (const at::Tensor& t : tensors) file.write(t.data_ptr(), t.nbytes());
//   file.commit();
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

namespace ooze {

class AtomicFile {
 public:
  // Creates the temporary next to `path`, with permission bits `mode` (less the umask).
  // Throws IoError naming `path` and the OS error (missing directory, no permission, ...).
  explicit AtomicFile(const std::string& path, unsigned mode = 0644);
  // Without a successful commit(): removes the temporary and leaves `path` as it was.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Sets aside the file's final size, `bytes`, on disk before it is written (the file is that
  // long from then on), so that a full disk or a file-size limit fails at once, not after
  // gigabytes, and the error can say how much was needed. Throws IoError naming `path`, the bytes
  // and the space free on its filesystem. A filesystem that cannot reserve space (no fallocate) is
  // written without.
  void reserve(uint64_t bytes);

  // Appends raw bytes (buffered; large blocks go straight to the file). Throws IoError.
  void write(const void* data, size_t size);
  void write(const std::string& bytes);
  // The same file as a std::ostream for formatted output. Write errors do not throw here;
  // commit() reports them.
  std::ostream& stream() { return stream_; }

  // Flushes, fsyncs, renames the temporary over `path`, fsyncs the directory (best effort: some
  // file systems refuse). Throws IoError naming `path`, after removing the temporary.
  void commit();

  const std::string& path() const { return path_; }

 private:
  class Buffer;
  [[noreturn]] void fail(const std::string& what, int error_number);
  void discard();  // closes and removes the temporary

  std::string path_;
  std::string temporary_;
  uint64_t reserved_ = 0;
  int fd_ = -1;
  bool committed_ = false;
  std::unique_ptr<Buffer> buffer_;
  std::ostream stream_{nullptr};
};

// `path` replaced by `content`, through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& content);
// `path` replaced by what `write` puts into the stream. If `write` throws, `path` keeps its old
// content, no temporary remains, and the exception propagates.
void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write);

// fsync of a directory, so that a rename or a new entry in it survives a power loss ("" is the
// current directory). Best effort: file systems that cannot sync directories are tolerated.
void sync_directory(const std::string& dir);

}  // namespace ooze
