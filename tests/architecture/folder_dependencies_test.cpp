// The library folders form a strict order (docs/architecture.md): a folder may include its own
// headers and those of the folders it builds on, never one above it. This test reads every
// source file of every library folder and fails on an include that breaks the order, naming the
// file, the line and the folder it reached, so that a cycle cannot creep back in.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace ooze::architecture {
namespace folder_dependencies_test {

namespace fs = std::filesystem;

// Each library folder and the folders it builds on directly; what those build on is allowed too.
// Keep in step with the CMake DEPS of each folder and with docs/architecture.md.
const std::map<std::string, std::set<std::string>> kBuildsOn = {
    {"core", {}},
    {"python", {"core"}},
    {"comm", {"core"}},
    {"models", {"comm"}},
    {"actors", {"comm"}},
    {"algorithms", {"core"}},
    {"weight_sync", {"actors", "comm"}},
    {"engine", {"models", "weight_sync"}},
    {"serving", {"engine", "actors"}},
    {"fsdp", {"models"}},
    {"trainer", {"fsdp", "algorithms", "serving", "python"}},
    {"rollout", {"serving", "python"}},
    {"launcher", {"trainer", "rollout"}},
};

std::set<std::string> allowed_for(const std::string& folder) {
  std::set<std::string> allowed = {folder};
  std::vector<std::string> pending = {folder};
  while (!pending.empty()) {
    const std::string next = pending.back();
    pending.pop_back();
    for (const std::string& below : kBuildsOn.at(next)) {
      if (allowed.insert(below).second) pending.push_back(below);
    }
  }
  return allowed;
}

struct Violation {
  std::string where;  // file:line
  std::string include;
};

std::vector<Violation> violations_in(const fs::path& root, const std::string& folder) {
  const std::set<std::string> allowed = allowed_for(folder);
  const std::regex include_line(R"re(^\s*#\s*include\s*"([A-Za-z_]+)/[^"]+")re");
  std::vector<Violation> found;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(root / folder)) {
    const std::string extension = entry.path().extension().string();
    if (extension != ".h" && extension != ".cpp") continue;
    std::ifstream in(entry.path());
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      std::smatch match;
      if (!std::regex_search(line, match, include_line)) continue;
      const std::string target = match[1];
      if (kBuildsOn.count(target) && !allowed.count(target)) {
        found.push_back(
            {fs::relative(entry.path(), root).string() + ":" + std::to_string(number), line});
      }
    }
  }
  return found;
}

TEST(FolderDependenciesTest, NoLibraryFolderIncludesAFolderAboveIt) {
  const fs::path root = OOZE_SOURCE_DIR;
  for (const auto& [folder, builds_on] : kBuildsOn) {
    ASSERT_TRUE(fs::is_directory(root / folder)) << folder << "/ is listed but missing";
    for (const Violation& violation : violations_in(root, folder)) {
      ADD_FAILURE() << violation.where << ": " << folder << "/ may not include "
                    << violation.include << " (it is above " << folder
                    << "/ in docs/architecture.md's order)";
    }
  }
}

TEST(FolderDependenciesTest, EveryLibraryFolderIsInTheOrder) {
  // A new folder with code must take its place in the order, or the check above would miss it.
  const fs::path root = OOZE_SOURCE_DIR;
  const std::set<std::string> not_libraries = {"bench",    "build",   "cmake", "docs",
                                               "examples", "scripts", "tests"};
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name[0] == '.' || not_libraries.count(name)) continue;
    if (!fs::exists(entry.path() / "CMakeLists.txt")) continue;
    EXPECT_TRUE(kBuildsOn.count(name)) << name << "/ builds a library but is not in kBuildsOn";
  }
}

TEST(FolderDependenciesTest, TheCheckCatchesAnIncludeFromAbove) {
  // The checker itself, on a folder written for the purpose: engine/ reaching into serving/.
  const fs::path root = fs::temp_directory_path() / ("ooze-layering-" + std::to_string(::getpid()));
  fs::create_directories(root / "engine");
  std::ofstream(root / "engine" / "bad.cpp") << "#include \"engine/engine.h\"\n"
                                             << "#include \"serving/router.h\"\n";
  const std::vector<Violation> found = violations_in(root, "engine");
  fs::remove_all(root);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].where, "engine/bad.cpp:2");
  EXPECT_EQ(found[0].include, "#include \"serving/router.h\"");
}

}  // namespace folder_dependencies_test
}  // namespace ooze::architecture
