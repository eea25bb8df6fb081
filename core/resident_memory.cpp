#include "core/resident_memory.h"

#include <fstream>
#include <string>

#include "core/error.h"

namespace ooze {
namespace {

// The "NAME:   1234 kB" line of /proc/self/status, in bytes.
int64_t status_bytes(const std::string& name) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(name + ":", 0) == 0) return std::stoll(line.substr(name.size() + 1)) * 1024;
  }
  throw IoError("/proc/self/status has no " + name + " line");
}

}  // namespace

int64_t resident_bytes() { return status_bytes("VmRSS"); }

int64_t peak_resident_bytes() { return status_bytes("VmHWM"); }

bool reset_peak_resident_bytes() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

}  // namespace ooze
