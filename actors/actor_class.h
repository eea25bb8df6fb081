// Registering actor classes and their methods, once per program.
//
//   class Counter {
//    public:
//     explicit Counter(int start) : value_(start) {}
//     int add(int delta) { return value_ += delta; }
//     int get() const { return value_; }
//    private:
//     int value_;
//   };
//   static const auto counter_class = ooze::actors::ActorClass<Counter>("Counter")
//       .constructor<int>()
//       .method("add", &Counter::add)
//       .method("get", &Counter::get);
//
// A method T inherits from a base class registers and is called like its own (&T::method or
// &Base::method name the same one).
//
// The driver and the worker processes run the same program, so both see the same registry: the
// driver looks methods up by member pointer (handle.call(&Counter::add, 1)) and sends the name;
// the worker looks the name up and runs it. Arguments, results and constructor arguments are
// cereal-serialized (wire_archive.h): any type with a cereal serialize function, standard
// containers (include their cereal/types headers), and at::Tensor (core/tensor_serialization.h).
//
// Define the registration in a translation unit the program links for another reason (the one
// with the class's methods): a static library drops object files nothing refers to.
#pragma once

#include <any>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/wire.h"

namespace ooze::actors {

// The readable name of a C++ type ("std::tuple<int, std::string>").
std::string type_name(const std::type_info& type);
std::string type_name(std::type_index type);

// Arguments and results of one call: the body plus out-of-band parts (wire.h).
struct Payload {
  std::string bytes;
  std::vector<zmq::message_t> blobs;
};

struct MethodEntry {
  std::string name;  // "Counter.add"
  std::any pointer;  // the member function pointer it was registered with
  // Runs the method on `instance` with the serialized arguments; returns the serialized result.
  std::function<Payload(void* instance, Payload& arguments)> invoke;
};

struct ClassEntry {
  std::string name;
  std::type_index type = typeid(void);
  std::type_index constructor_arguments = typeid(std::tuple<>);
  std::function<std::shared_ptr<void>(Payload& arguments)> construct;
  std::vector<MethodEntry> methods;
  std::unordered_map<std::string, std::size_t> method_index;

  const MethodEntry* find_method(const std::string& qualified_name) const;
};

class ActorRegistry {
 public:
  static ActorRegistry& instance();
  ClassEntry& add(std::string name, std::type_index type);
  // Throw ooze::ConfigError naming the class and saying how to register it.
  const ClassEntry& by_name(const std::string& name) const;
  const ClassEntry& by_type(std::type_index type) const;
  const ClassEntry* find(const std::string& name) const;

 private:
  std::unordered_map<std::string, std::unique_ptr<ClassEntry>> by_name_;
  std::unordered_map<std::type_index, ClassEntry*> by_type_;
};

// Serialization of argument tuples and results through the wire archives, with tensors out of
// band (wire_payload.h defines them).
template <class T>
Payload to_payload(const T& value);
template <class T>
T from_payload(Payload& payload);

template <class T>
class ActorClass {
 public:
  // Without a constructor<...>() the class is built with its default constructor.
  explicit ActorClass(std::string name)
      : entry_(&ActorRegistry::instance().add(std::move(name), typeid(T))) {
    if constexpr (std::is_default_constructible_v<T>) constructor<>();
  }

  template <class... Args>
  ActorClass& constructor() {
    static_assert(std::is_constructible_v<T, Args...>,
                  "the actor class has no constructor taking these arguments");
    using Tuple = std::tuple<std::decay_t<Args>...>;
    entry_->constructor_arguments = typeid(Tuple);
    entry_->construct = [](Payload& arguments) -> std::shared_ptr<void> {
      auto values = from_payload<Tuple>(arguments);
      return std::apply(
          [](auto&&... unpacked) {
            return std::static_pointer_cast<void>(
                std::make_shared<T>(std::forward<decltype(unpacked)>(unpacked)...));
          },
          std::move(values));
    };
    return *this;
  }

  // `pointer` may be a method T inherits: &T::method then has the base class's type, and is
  // kept as a method of T so that either spelling finds it (registered_method_name).
  template <class C, class R, class... Params>
  ActorClass& method(const std::string& name, R (C::*pointer)(Params...)) {
    static_assert(std::is_base_of_v<C, T>, "the method is not one of the actor class");
    return add_method<R, Params...>(name, static_cast<R (T::*)(Params...)>(pointer));
  }
  template <class C, class R, class... Params>
  ActorClass& method(const std::string& name, R (C::*pointer)(Params...) const) {
    static_assert(std::is_base_of_v<C, T>, "the method is not one of the actor class");
    return add_method<R, Params...>(name, static_cast<R (T::*)(Params...) const>(pointer));
  }

 private:
  template <class R, class... Params, class Pointer>
  ActorClass& add_method(const std::string& name, Pointer pointer) {
    MethodEntry method;
    method.name = entry_->name + "." + name;
    method.pointer = pointer;
    method.invoke = [pointer](void* instance, Payload& arguments) -> Payload {
      auto values = from_payload<std::tuple<std::decay_t<Params>...>>(arguments);
      T* self = static_cast<T*>(instance);
      if constexpr (std::is_void_v<R>) {
        std::apply([&](auto&&... a) { (self->*pointer)(std::forward<decltype(a)>(a)...); },
                   std::move(values));
        return Payload{};
      } else {
        return to_payload<std::decay_t<R>>(std::apply(
            [&](auto&&... a) { return (self->*pointer)(std::forward<decltype(a)>(a)...); },
            std::move(values)));
      }
    };
    entry_->method_index[method.name] = entry_->methods.size();
    entry_->methods.push_back(std::move(method));
    return *this;
  }

  ClassEntry* entry_;
};

namespace detail {
// Pointers to virtual methods compare by vtable slot under the Itanium C++ ABI (GCC, Clang), so
// an overridden method is found whichever class of the hierarchy spells it.
template <class T, class Pointer>
const std::string& find_method_name(Pointer pointer) {
  const ClassEntry& entry = ActorRegistry::instance().by_type(typeid(T));
  for (const MethodEntry& method : entry.methods) {
    const Pointer* candidate = std::any_cast<Pointer>(&method.pointer);
    if (candidate != nullptr && *candidate == pointer) return method.name;
  }
  throw ConfigError("a method of actor class " + entry.name +
                    " was called that is not registered: add .method(\"name\", &" + entry.name +
                    "::name) to its ActorClass");
}
}  // namespace detail

// The registered name of `pointer`, a method of T or one T inherits ("Counter.add"); throws
// ooze::ConfigError when T or the method was not registered.
template <class T, class C, class R, class... Params>
const std::string& registered_method_name(R (C::*pointer)(Params...)) {
  static_assert(std::is_base_of_v<C, T>, "the method is not one of the actor class");
  return detail::find_method_name<T>(static_cast<R (T::*)(Params...)>(pointer));
}
template <class T, class C, class R, class... Params>
const std::string& registered_method_name(R (C::*pointer)(Params...) const) {
  static_assert(std::is_base_of_v<C, T>, "the method is not one of the actor class");
  return detail::find_method_name<T>(static_cast<R (T::*)(Params...) const>(pointer));
}

}  // namespace ooze::actors

#include "actors/wire_payload.h"
