#include "launcher/gnuplot_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"

extern char** environ;

namespace ooze::launcher {
namespace {

namespace fs = std::filesystem;

// A private directory for what gnuplot prints, removed with everything in it.
class GnuplotScratchDir {
 public:
  GnuplotScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "ooze-gnuplot-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw IoError("cannot create a temporary directory for gnuplot's output under '" +
                    fs::temp_directory_path().string() + "': " + std::strerror(errno));
    }
    path_ = pattern;
  }
  ~GnuplotScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  GnuplotScratchDir(const GnuplotScratchDir&) = delete;
  GnuplotScratchDir& operator=(const GnuplotScratchDir&) = delete;
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

std::string whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

void run_gnuplot(const std::string& program, const std::string& script_path) {
  GnuplotScratchDir scratch;
  const std::string log_path = scratch.file("gnuplot.log");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, script_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> argv = {const_cast<char*>(program.c_str()), nullptr};
  pid_t pid = -1;
  const int spawned =
      ::posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned == ENOENT) {
    throw Error("cannot find '" + program +
                "' on PATH: ooze plot draws with gnuplot; install it with scripts/install-deps.sh "
                "(Debian package gnuplot-nox)");
  }
  if (spawned != 0) {
    throw Error("cannot start '" + program + "': " + std::strerror(spawned));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw Error("waiting for gnuplot failed: " + std::string(std::strerror(errno)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status));
  std::string output = whole_file(log_path);
  if (output.size() > 4000) output = "..." + output.substr(output.size() - 4000);
  throw Error("gnuplot failed (" + how + ") on " + script_path + "; it printed:\n" + output);
}

}  // namespace ooze::launcher
