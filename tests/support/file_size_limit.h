// A disk that fills up, for the duration of a scope: lowers the file-size limit (RLIMIT_FSIZE)
// so that writes past `bytes` fail with EFBIG, a real write error that needs no special file
// system, as a write past a full disk fails with ENOSPC. SIGXFSZ is ignored meanwhile, so the
// write fails instead of killing the process; both are restored on exit.
#pragma once

#include <sys/resource.h>

#include <csignal>

namespace ooze::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = saved_;
    limited.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limited);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = nullptr;
};

}  // namespace ooze::testing
