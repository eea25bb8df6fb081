#include "rollout/plugin_function.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <utility>

namespace ooze::rollout {
namespace {

const char* const kHeader = "rollout/reward_plugin.h";

bool is_identifier(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

bool is_known_kind(int value) {
  return value >= static_cast<int>(plugin::Kind::kReward) &&
         value <= static_cast<int>(plugin::Kind::kGenerate);
}

// dlerror() is per thread; loads are serialized by the registry's mutex anyway.
std::string last_dl_error() {
  const char* text = dlerror();
  return text != nullptr ? text : "unknown dynamic loader error";
}

// Every library opened so far, by absolute path. Handles are never closed: plugin code may
// keep static state and threads may still be inside it while the process winds down.
class LibraryRegistry {
 public:
  static LibraryRegistry& instance() {
    static LibraryRegistry* registry = new LibraryRegistry();  // never destroyed, like handles
    return *registry;
  }

  // Opens `path` (absolute) once; throws PluginError with dlerror's text.
  void* open(const std::string& path, const std::string& who) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = handles_.find(path);
    if (found != handles_.end()) return found->second;
    dlerror();  // clear a stale error
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      throw PluginError(who + ": cannot load the library: " + last_dl_error() +
                        ". Build the plugin as a shared library (add_library(NAME MODULE ...)) "
                        "for this machine, with every library it needs on the loader's path");
    }
    handles_.emplace(path, handle);
    return handle;
  }

  // The address of `symbol` in `handle`, or nullptr.
  void* find(void* handle, const std::string& symbol) {
    std::lock_guard<std::mutex> lock(mutex_);
    dlerror();
    return dlsym(handle, symbol.c_str());
  }

 private:
  std::mutex mutex_;
  std::map<std::string, void*> handles_;
};

std::string sample_text(const Sample& sample) {
  return "sample " + std::to_string(sample.index) + " (group " +
         std::to_string(sample.group_index) + ")";
}

// "group 3 (8 samples)", or a batch's group range when its samples come from several groups.
std::string samples_text(const std::vector<Sample>& samples, const char* noun) {
  if (samples.empty()) return std::string("an empty ") + noun;
  int64_t lowest = samples.front().group_index;
  int64_t highest = lowest;
  for (const Sample& sample : samples) {
    lowest = std::min(lowest, sample.group_index);
    highest = std::max(highest, sample.group_index);
  }
  const std::string count = std::to_string(samples.size()) + " samples";
  if (lowest == highest) return "group " + std::to_string(lowest) + " (" + count + ")";
  return std::string("a ") + noun + " of " + count + " (groups " + std::to_string(lowest) + ".." +
         std::to_string(highest) + ")";
}

}  // namespace

const char* to_string(plugin::Kind kind) {
  switch (kind) {
    case plugin::Kind::kReward:
      return "reward function";
    case plugin::Kind::kBatchedReward:
      return "batched reward function";
    case plugin::Kind::kGroupFilter:
      return "group filter";
    case plugin::Kind::kBufferFilter:
      return "buffer filter";
    case plugin::Kind::kGenerate:
      return "generate function";
  }
  return "unknown kind";
}

const char* export_macro_of(plugin::Kind kind) {
  switch (kind) {
    case plugin::Kind::kReward:
      return "OOZE_EXPORT_REWARD";
    case plugin::Kind::kBatchedReward:
      return "OOZE_EXPORT_BATCHED_REWARD";
    case plugin::Kind::kGroupFilter:
      return "OOZE_EXPORT_GROUP_FILTER";
    case plugin::Kind::kBufferFilter:
      return "OOZE_EXPORT_BUFFER_FILTER";
    case plugin::Kind::kGenerate:
      return "OOZE_EXPORT_GENERATE";
  }
  return "OOZE_EXPORT_*";
}

PluginFunction PluginFunction::load(const std::string& spec, plugin::Kind expected,
                                    const std::string& flag) {
  return load_any(spec, {expected}, flag);
}

PluginFunction PluginFunction::load_any(const std::string& spec,
                                        const std::vector<plugin::Kind>& accepted,
                                        const std::string& flag) {
  if (accepted.empty()) throw PluginError(flag + " " + spec + ": no plugin kind is accepted");
  // "a reward function (exported with OOZE_EXPORT_REWARD(fn)) or a batched ..."
  auto accepted_text = [&](const std::string& function) {
    std::string text;
    for (size_t i = 0; i < accepted.size(); ++i) {
      if (i > 0) text += " or ";
      text += std::string("a ") + to_string(accepted[i]) + " (exported with " +
              export_macro_of(accepted[i]) + "(" + function + "))";
    }
    return text;
  };
  auto macros_text = [&](const std::string& function) {
    std::string text;
    for (size_t i = 0; i < accepted.size(); ++i) {
      if (i > 0) text += " or ";
      text += std::string(export_macro_of(accepted[i])) + "(" + function + ")";
    }
    return text;
  };
  const std::string who = flag + " " + spec;
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos) {
    throw PluginError(flag + " '" + spec + "' names no function: give path/to/lib.so:function");
  }
  const std::string path_text = spec.substr(0, colon);
  const std::string function = spec.substr(colon + 1);
  if (path_text.empty()) {
    throw PluginError(flag + " '" + spec + "' names no library: give path/to/lib.so:function");
  }
  if (!is_identifier(function)) {
    throw PluginError(flag + " '" + spec + "': '" + function +
                      "' is not a function name: give path/to/lib.so:function, the name the "
                      "plugin passed to " +
                      macros_text("NAME"));
  }

  // An absolute path, so dlopen never searches the system's library directories for it.
  std::error_code error;
  const std::filesystem::path path = std::filesystem::absolute(path_text, error);
  if (error || !std::filesystem::exists(path, error)) {
    throw PluginError(who + ": the library " + path.string() +
                      " does not exist (a relative path is taken from the working directory " +
                      std::filesystem::current_path(error).string() + ")");
  }
  if (std::filesystem::is_directory(path, error)) {
    throw PluginError(who + ": " + path.string() + " is a directory, not a shared library");
  }

  LibraryRegistry& registry = LibraryRegistry::instance();
  void* handle = registry.open(path.string(), who);

  const std::string info_symbol = "ooze_plugin_info_" + function;
  const std::string entry_symbol = "ooze_plugin_" + function;
  const auto* info = static_cast<const plugin::EntryInfo*>(registry.find(handle, info_symbol));
  void* entry = registry.find(handle, entry_symbol);
  if (info == nullptr || entry == nullptr) {
    const bool bare = registry.find(handle, function) != nullptr;
    throw PluginError(
        who + ": the library exports no plugin function '" + function + "' (symbol " +
        (info == nullptr ? info_symbol : entry_symbol) + " is missing)" +
        (bare ? "; it has a plain symbol '" + function + "', which ooze cannot call safely" : "") +
        ". Export the function with " + macros_text(function) + " from " + kHeader +
        " (plugin functions are found by the symbols that macro defines)");
  }
  if (info->abi_version != plugin::kAbiVersion) {
    throw PluginError(who + ": the plugin was built against plugin ABI version " +
                      std::to_string(info->abi_version) + ", but this ooze uses version " +
                      std::to_string(plugin::kAbiVersion) + ". Rebuild the plugin against this " +
                      "ooze's " + kHeader);
  }
  const int kind_value = static_cast<int>(info->kind);
  if (!is_known_kind(kind_value)) {
    throw PluginError(who + ": the plugin's descriptor has an unknown kind " +
                      std::to_string(kind_value) + ". Rebuild the plugin against this ooze's " +
                      kHeader);
  }
  if (std::find(accepted.begin(), accepted.end(), info->kind) == accepted.end()) {
    throw PluginError(who + ": '" + function + "' is a " + to_string(info->kind) +
                      " (exported with " + export_macro_of(info->kind) + "), but " + flag +
                      " takes " + accepted_text(function));
  }

  PluginFunction loaded;
  loaded.spec_ = spec;
  loaded.flag_ = flag;
  loaded.kind_ = info->kind;
  loaded.entry_ = reinterpret_cast<Entry>(entry);
  return loaded;
}

std::string PluginFunction::who() const { return flag_ + " " + spec_; }

void PluginFunction::require_kind(plugin::Kind wanted, const char* method) const {
  if (kind_ != wanted) {
    throw PluginError(who() + " is a " + to_string(kind_) + "; PluginFunction::" + method +
                      " calls a " + to_string(wanted));
  }
}

void PluginFunction::invoke(plugin::Call& call, const std::string& on_what) const {
  entry_(&call);
  if (!call.error.empty()) {
    throw PluginError(who() + " failed on " + on_what + ": " + call.error);
  }
}

nlohmann::json PluginFunction::reward(const Sample& sample) const {
  require_kind(plugin::Kind::kReward, "reward");
  nlohmann::json reward;
  plugin::Call call;
  call.input = &sample;
  call.output = &reward;
  invoke(call, sample_text(sample));
  return reward;
}

std::vector<nlohmann::json> PluginFunction::batched_reward(
    const std::vector<Sample>& samples) const {
  require_kind(plugin::Kind::kBatchedReward, "batched_reward");
  std::vector<nlohmann::json> rewards;
  plugin::Call call;
  call.input = &samples;
  call.output = &rewards;
  const std::string on_what = samples_text(samples, "batch");
  invoke(call, on_what);
  if (rewards.size() != samples.size()) {
    throw PluginError(who() + " returned " + std::to_string(rewards.size()) + " rewards for " +
                      on_what + ": a batched reward function returns one reward per sample, " +
                      "in the samples' order");
  }
  return rewards;
}

plugin::FilterDecision PluginFunction::filter_group(const std::vector<Sample>& group) const {
  require_kind(plugin::Kind::kGroupFilter, "filter_group");
  plugin::FilterDecision decision;
  plugin::Call call;
  call.input = &group;
  call.output = &decision;
  invoke(call, samples_text(group, "group"));
  return decision;
}

std::vector<std::vector<Sample>> PluginFunction::filter_buffer(
    std::vector<std::vector<Sample>>& buffer, int64_t num_groups) const {
  require_kind(plugin::Kind::kBufferFilter, "filter_buffer");
  std::vector<std::vector<Sample>> taken;
  plugin::Call call;
  call.output = &taken;
  call.buffer = &buffer;
  call.count = num_groups;
  const std::string on_what = "a buffer of " + std::to_string(buffer.size()) +
                              " groups (asked for " + std::to_string(num_groups) + ")";
  invoke(call, on_what);
  if (static_cast<int64_t>(taken.size()) > num_groups) {
    throw PluginError(who() + " returned " + std::to_string(taken.size()) + " groups from " +
                      on_what + ": a buffer filter returns at most the groups asked for and " +
                      "leaves the rest in the buffer");
  }
  return taken;
}

void PluginFunction::generate(plugin::GenerationContext& context, Sample& sample) const {
  require_kind(plugin::Kind::kGenerate, "generate");
  plugin::Call call;
  call.output = &sample;
  call.context = &context;
  invoke(call, sample_text(sample));
}

}  // namespace ooze::rollout
