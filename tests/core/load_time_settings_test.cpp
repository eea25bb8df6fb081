// The test programs start as ooze does (tests/support/test_main.cpp calls
// start_with_load_time_settings first), so this process shows what a user's gets.
#include "core/load_time_settings.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace ooze {
namespace {

TEST(LoadTimeSettings, HugePagesJoinTheUsersTunablesUnlessTheyChoseThemselves) {
  EXPECT_EQ(tunables_with_huge_pages(nullptr), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(tunables_with_huge_pages(""), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(tunables_with_huge_pages("glibc.malloc.arena_max=2"),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
  EXPECT_EQ(tunables_with_huge_pages("glibc.malloc.hugetlb=0"), "");
  EXPECT_EQ(tunables_with_huge_pages("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"), "");
}

// Kilobytes of transparent huge pages in the mapping of this process that holds `address`
// (/proc/self/smaps), or -1 when no mapping holds it.
int64_t huge_page_kb_at(const void* address) {
  const auto where = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t start = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> start >> dash >> end && dash == '-') {
      inside = start <= where && where < end;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::stoll(line.substr(std::strlen("AnonHugePages:")));
    }
  }
  return -1;
}

TEST(LoadTimeSettings, LargeAllocationsGetTransparentHugePages) {
  const std::string mode = transparent_huge_page_mode();
  if (mode != "madvise" && mode != "always") {
    GTEST_SKIP() << "transparent huge pages are '" << mode << "' on this machine";
  }
  // 64 MiB: glibc maps it afresh (above its 32 MiB mmap threshold), as a gathered layer.
  constexpr size_t kBytes = size_t{64} << 20;
  char* block = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);  // the faults that place the pages
  const int64_t huge_kb = huge_page_kb_at(block);
  std::free(block);
  // All of it but the unaligned ends: in 2 MiB pages, not the 16,384 4 kB ones it faulted in
  // before ooze asked glibc for them.
  EXPECT_GE(huge_kb, 60 * 1024) << "GLIBC_TUNABLES="
                                << (std::getenv("GLIBC_TUNABLES") ? std::getenv("GLIBC_TUNABLES")
                                                                  : "(unset)");
}

}  // namespace
}  // namespace ooze
