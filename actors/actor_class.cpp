#include "actors/actor_class.h"

#include <cxxabi.h>

#include <cstdlib>

namespace ooze::actors {

namespace {

std::string demangle(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  return name;
}

}  // namespace

std::string type_name(const std::type_info& type) { return demangle(type.name()); }
std::string type_name(std::type_index type) { return demangle(type.name()); }

const MethodEntry* ClassEntry::find_method(const std::string& qualified_name) const {
  auto found = method_index.find(qualified_name);
  return found == method_index.end() ? nullptr : &methods[found->second];
}

ActorRegistry& ActorRegistry::instance() {
  static ActorRegistry* registry = new ActorRegistry();
  return *registry;
}

ClassEntry& ActorRegistry::add(std::string name, std::type_index type) {
  if (by_name_.count(name) != 0) {
    throw ConfigError("actor class \"" + name + "\" is registered twice");
  }
  auto entry = std::make_unique<ClassEntry>();
  entry->name = name;
  entry->type = type;
  ClassEntry& added = *entry;
  by_name_[name] = std::move(entry);
  by_type_[type] = &added;
  return added;
}

const ClassEntry* ActorRegistry::find(const std::string& name) const {
  auto found = by_name_.find(name);
  return found == by_name_.end() ? nullptr : found->second.get();
}

const ClassEntry& ActorRegistry::by_name(const std::string& name) const {
  const ClassEntry* entry = find(name);
  if (entry == nullptr) {
    throw ConfigError("no actor class named \"" + name +
                      "\" is registered in this program: declare a static "
                      "ooze::actors::ActorClass<T>(\"" +
                      name + "\") in a file it links");
  }
  return *entry;
}

const ClassEntry& ActorRegistry::by_type(std::type_index type) const {
  auto found = by_type_.find(type);
  if (found == by_type_.end()) {
    throw ConfigError("actor class " + demangle(type.name()) +
                      " is not registered: declare a static ooze::actors::ActorClass<T>(\"Name\")");
  }
  return *found->second;
}

}  // namespace ooze::actors
