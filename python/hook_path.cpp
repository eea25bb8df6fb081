#include "python/hook_path.h"

#include <filesystem>

namespace ooze::python {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

HookPathKind hook_path_kind(const std::string& path) {
  const size_t colon = path.rfind(':');
  if (colon != std::string::npos) {
    const std::string where = path.substr(0, colon);
    // libfoo.so and versioned libfoo.so.1
    if (ends_with(where, ".so") || where.find(".so.") != std::string::npos) {
      return HookPathKind::kSharedLibrary;
    }
    return HookPathKind::kPython;
  }
  // A library without its function still is one: the plugin loader says what is missing.
  if (ends_with(path, ".so")) return HookPathKind::kSharedLibrary;
  if (path.find_first_of("./") != std::string::npos) return HookPathKind::kPython;
  return HookPathKind::kBuiltin;
}

std::string with_absolute_file(const std::string& path) {
  const size_t colon = path.rfind(':');
  if (colon == std::string::npos || hook_path_kind(path) != HookPathKind::kPython) return path;
  const std::string where = path.substr(0, colon);
  // As python/ooze/function_path.py tells a file from a module.
  if (where.empty() || (!ends_with(where, ".py") && where.find('/') == std::string::npos)) {
    return path;
  }
  return std::filesystem::absolute(where).lexically_normal().string() + path.substr(colon);
}

}  // namespace ooze::python
