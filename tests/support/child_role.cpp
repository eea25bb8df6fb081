#include "tests/support/child_role.h"

#include <filesystem>
#include <map>
#include <stdexcept>

namespace ooze::testing {
namespace {

// A function-local map: registrations run during static initialisation, in any file order.
std::map<std::string, ChildRole>& roles() {
  static std::map<std::string, ChildRole> registered;
  return registered;
}

}  // namespace

bool register_child_role(const std::string& flag, ChildRole role) {
  if (!roles().emplace(flag, std::move(role)).second) {
    throw std::logic_error("two child roles are registered as " + flag);
  }
  return true;
}

std::optional<int> run_child_role_if_requested(int argc, char** argv) {
  if (argc < 2) return std::nullopt;
  const auto role = roles().find(argv[1]);
  if (role == roles().end()) return std::nullopt;
  return role->second(std::vector<std::string>(argv + 2, argv + argc));
}

std::string self_executable() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

}  // namespace ooze::testing
