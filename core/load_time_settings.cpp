#include "core/load_time_settings.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/blas_kernels.h"
#include "core/logging.h"

namespace ooze {

std::string tunables_with_huge_pages(const char* tunables) {
  const std::string current = tunables == nullptr ? "" : tunables;
  if (current.find("glibc.malloc.hugetlb") != std::string::npos) return "";
  return (current.empty() ? "" : current + ":") + "glibc.malloc.hugetlb=1";
}

std::string transparent_huge_page_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(in, modes);
  const size_t open = modes.find('['), close = modes.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return modes.substr(open + 1, close - open - 1);
}

void start_with_load_time_settings(char** argv) {
  std::vector<std::string> added;  // NAME=value, to say what a failed restart lacks
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && blas_kernel_name() == "Prescott") {
    const std::string best = best_blas_kernel_for_this_cpu();
    if (!best.empty()) {
      ::setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
      added.push_back("OPENBLAS_CORETYPE=" + best);
    }
  }
  // With "always" every large mapping gets huge pages already; with "never" none can.
  if (transparent_huge_page_mode() == "madvise") {
    const std::string tunables = tunables_with_huge_pages(std::getenv("GLIBC_TUNABLES"));
    if (!tunables.empty()) {
      ::setenv("GLIBC_TUNABLES", tunables.c_str(), 1);
      added.push_back("GLIBC_TUNABLES=" + tunables);
    }
  }
  if (added.empty()) return;
  ::execv("/proc/self/exe", argv);
  std::string settings;
  for (const std::string& setting : added) settings += " " + setting;
  OOZE_LOG(WARN) << "restarting with" << settings << " failed (" << std::strerror(errno)
                 << "): matrix products or large allocations will be slower";
}

}  // namespace ooze
