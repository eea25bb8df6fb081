// Each option declared once: the field list of one options struct says, per member, its flag
// name, doc and range. From that one list come the schema entries (type from the member, default
// from a default-built struct, so --help shows the value a run uses), reading a Config into the
// struct, and the struct's JSON, which is also how it travels in actor calls. A module composes
// the lists of the modules it configures with include(), so a sub-module's options are a member
// filled by its own list, never copied field by field. Flags are one flat namespace; in JSON an
// included struct is an object of its own.
//
//   // fsdp/sharded_adamw.cpp
//   const OptionFields<ShardedAdamWOptions>& ShardedAdamWOptions::fields() {
//     static const OptionFields<ShardedAdamWOptions> fields = [] {
//       OptionFields<ShardedAdamWOptions> f;
//       f.add("adam_beta1", &ShardedAdamWOptions::beta1, "AdamW beta1.").min(0).less_than(1);
//       return f;
//     }();
//     return fields;
//   }
//   ShardedAdamWOptions::fields().declare(schema);           // --adam-beta1, default 0.9
//   auto adamw = ShardedAdamWOptions::fields().read(config);  // .beta1 from the flag
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/error.h"

namespace ooze {

template <class Options>
class OptionFields {
 public:
  // Entries added after this call are declared in section `name`; before it, in whatever
  // section the schema is in when declare() runs.
  OptionFields& section(const std::string& name) {
    section_ = name;
    return *this;
  }

  // A flag whose type follows the member's: bool, int64_t or int (an int flag), double,
  // std::string, std::vector<int64_t> or std::vector<std::string>.
  template <class T>
  FieldSpec& add(const std::string& name, T Options::*member, const std::string& doc) {
    FieldSpec& spec = push_flag(name, field_type_of<T>(), doc);
    Entry& entry = entries_.back();
    entry.get = [member](const Options& options) { return nlohmann::json(options.*member); };
    entry.set = [member](const nlohmann::json& value, Options& options) {
      options.*member = value.get<T>();
    };
    return spec;
  }

  // A string flag that takes one of `choices`.
  FieldSpec& add_choice(const std::string& name, std::string Options::*member,
                        std::vector<std::string> choices, const std::string& doc) {
    FieldSpec& spec = add(name, member, doc);
    spec.type = FieldType::kEnum;
    spec.choices = std::move(choices);
    return spec;
  }

  // An enum member, spelled on the command line and in JSON by `name_of` of one of `values`.
  template <class E, class NameOf>
  FieldSpec& add_enum(const std::string& name, E Options::*member, std::vector<E> values,
                      NameOf name_of, const std::string& doc) {
    FieldSpec& spec = push_flag(name, FieldType::kEnum, doc);
    for (E value : values) spec.choices.push_back(std::string(name_of(value)));
    Entry& entry = entries_.back();
    entry.get = [member, name_of](const Options& options) {
      return nlohmann::json(std::string(name_of(options.*member)));
    };
    entry.set = [member, values, name_of, name](const nlohmann::json& value, Options& options) {
      const std::string text = value.get<std::string>();
      for (E candidate : values) {
        if (std::string(name_of(candidate)) == text) {
          options.*member = candidate;
          return;
        }
      }
      throw ConfigError(name + " = \"" + text + "\" is not one of its choices");
    };
    return spec;
  }

  // An optional member behind a flag that says "none" with `when_unset` (Megatron's 0 or -1).
  template <class T>
  FieldSpec& add_optional(const std::string& name, std::optional<T> Options::*member, T when_unset,
                          const std::string& doc) {
    FieldSpec& spec = push_flag(name, field_type_of<T>(), doc);
    entries_.back().get = [member, when_unset](const Options& options) {
      return nlohmann::json((options.*member).value_or(when_unset));
    };
    entries_.back().set = [member, when_unset](const nlohmann::json& value, Options& options) {
      const T given = value.get<T>();
      options.*member = given == when_unset ? std::nullopt : std::optional<T>(given);
    };
    return spec;
  }

  // A flag whose member is not spelled as the flag is (a dtype behind a bool, an optional behind
  // a sentinel value): `get` shows the member as the flag's value, `set` stores one.
  FieldSpec& add_custom(const std::string& name, FieldType type,
                        std::function<nlohmann::json(const Options&)> get,
                        std::function<void(const nlohmann::json&, Options&)> set,
                        const std::string& doc) {
    FieldSpec& spec = push_flag(name, type, doc);
    entries_.back().get = std::move(get);
    entries_.back().set = std::move(set);
    reading_can_fail_ = true;
    return spec;
  }

  // A rule relating the fields, run by read() after every flag is set: it throws ConfigError
  // naming the flags (typically the struct's validate()).
  void add_rule(std::function<void(const Options&)> rule) {
    rules_.push_back(std::move(rule));
    reading_can_fail_ = true;
  }

  // A member that travels with the struct (JSON, actor calls) but is no flag: the caller sets
  // it (a value derived from other flags, or one the run computes).
  template <class T>
  void add_internal(const std::string& name, T Options::*member) {
    Entry entry;
    entry.spec.name = name;
    entry.get = [member](const Options& options) { return nlohmann::json(options.*member); };
    entry.set = [member](const nlohmann::json& value, Options& options) {
      options.*member = value.get<T>();
    };
    entries_.push_back(std::move(entry));
  }
  // The same for an enum member.
  template <class E>
  void add_internal_enum(const std::string& name, E Options::*member) {
    static_assert(std::is_enum_v<E>);
    using Raw = std::underlying_type_t<E>;
    Entry entry;
    entry.spec.name = name;
    entry.get = [member](const Options& options) {
      return nlohmann::json(static_cast<Raw>(options.*member));
    };
    entry.set = [member](const nlohmann::json& value, Options& options) {
      options.*member = static_cast<E>(value.get<Raw>());
    };
    entries_.push_back(std::move(entry));
  }

  // The fields of member struct `key`, as its own list declares them (in JSON, under "key").
  // as_flags false: the member travels with this struct but its flags are declared (and read)
  // by whoever owns them.
  template <class Sub>
  void include(const std::string& key, Sub Options::*member, const OptionFields<Sub>& fields,
               bool as_flags = true) {
    if (as_flags) {
      for (const auto& rule : fields.rules()) {
        rules_.push_back([member, rule](const Options& options) { rule(options.*member); });
      }
      reading_can_fail_ = reading_can_fail_ || fields.reading_can_fail();
    }
    for (const auto& sub : fields.entries()) {
      Entry entry;
      entry.spec = sub.spec;
      entry.is_flag = sub.is_flag && as_flags;
      if (entry.spec.section.empty()) entry.spec.section = section_;
      entry.json_path = {key};
      entry.json_path.insert(entry.json_path.end(), sub.json_path.begin(), sub.json_path.end());
      entry.get = [member, get = sub.get](const Options& options) { return get(options.*member); };
      entry.set = [member, set = sub.set](const nlohmann::json& value, Options& options) {
        set(value, options.*member);
      };
      entries_.push_back(std::move(entry));
    }
  }

  // Declares every flag in `schema`, each with its value in `defaults` as the default. When
  // reading can fail (custom entries, rules), reading becomes a check of the schema, so a bad
  // value or a contradiction is refused as the config loads, before anything starts. The list
  // must outlive the schema (lists are function-local statics).
  void declare(ConfigSchema& schema, const Options& defaults = Options{}) const {
    std::string first_flag;
    for (const Entry& entry : entries_) {
      if (!entry.is_flag) continue;
      if (first_flag.empty()) first_flag = entry.spec.name;
      FieldSpec spec = entry.spec;
      if (!spec.is_required) spec.default_value = entry.get(defaults);
      schema.add_field(std::move(spec));
    }
    if (!reading_can_fail_) return;
    schema.add_check("the options of --" + first_flag, [this](const Config& config) {
      try {
        read(config);
      } catch (const ConfigError& error) {
        return std::string(error.what());
      }
      return std::string();
    });
  }

  // Sets every flag's member from `config` (which must have been loaded with a schema these
  // flags were declared in), then checks the rules; other members keep their values in
  // `options`.
  Options read(const Config& config, Options options = Options{}) const {
    for (const Entry& entry : entries_) {
      if (entry.is_flag) entry.set(config.value(entry.spec.name), options);
    }
    for (const auto& rule : rules_) rule(options);
    return options;
  }

  // Every entry by name (enums by their flag spelling), an included struct's as an object.
  nlohmann::json to_json(const Options& options) const {
    nlohmann::json out = nlohmann::json::object();
    for (const Entry& entry : entries_) {
      nlohmann::json* at = &out;
      for (const std::string& key : entry.json_path) at = &(*at)[key];
      (*at)[entry.spec.name] = entry.get(options);
    }
    return out;
  }
  // The inverse of to_json; entries missing from `in` keep their values in `options`.
  Options from_json(const nlohmann::json& in, Options options = Options{}) const {
    for (const Entry& entry : entries_) {
      const nlohmann::json* at = &in;
      for (const std::string& key : entry.json_path) {
        auto found = at->find(key);
        at = found == at->end() ? nullptr : &*found;
        if (at == nullptr) break;
      }
      if (at == nullptr) continue;
      auto found = at->find(entry.spec.name);
      if (found != at->end()) entry.set(*found, options);
    }
    return options;
  }

  struct Entry {
    FieldSpec spec;  // default_value is filled in by declare()
    bool is_flag = false;
    std::vector<std::string> json_path;  // the include() keys it sits under
    std::function<nlohmann::json(const Options&)> get;
    std::function<void(const nlohmann::json&, Options&)> set;
  };
  const std::deque<Entry>& entries() const { return entries_; }
  const std::vector<std::function<void(const Options&)>>& rules() const { return rules_; }
  bool reading_can_fail() const { return reading_can_fail_; }

 private:
  template <class T>
  static constexpr FieldType field_type_of() {
    if constexpr (std::is_same_v<T, bool>) {
      return FieldType::kBool;
    } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int>) {
      return FieldType::kInt;
    } else if constexpr (std::is_same_v<T, double>) {
      return FieldType::kDouble;
    } else if constexpr (std::is_same_v<T, std::string>) {
      return FieldType::kString;
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      return FieldType::kIntList;
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      return FieldType::kStringList;
    } else {
      static_assert(detail::kAlwaysFalse<T>, "OptionFields::add: no flag type for this member");
    }
  }

  FieldSpec& push_flag(const std::string& name, FieldType type, const std::string& doc) {
    Entry entry;
    entry.spec.name = name;
    entry.spec.type = type;
    entry.spec.doc = doc;
    entry.spec.section = section_;
    entry.is_flag = true;
    entries_.push_back(std::move(entry));
    return entries_.back().spec;
  }

  std::string section_;
  std::deque<Entry> entries_;  // a deque: the FieldSpec references add_* return stay valid
  std::vector<std::function<void(const Options&)>> rules_;
  bool reading_can_fail_ = false;
};

// The actor wire carries an options struct as the JSON of its field list, so a member the list
// holds can never be left out of the wire. An options struct opts in with
//   template <class A> void save(A& ar) const { save_options(ar, *this); }
//   template <class A> void load(A& ar) { load_options(ar, *this); }
template <class Archive, class Options>
void save_options(Archive& ar, const Options& options) {
  ar(Options::fields().to_json(options).dump());
}
template <class Archive, class Options>
void load_options(Archive& ar, Options& options) {
  std::string text;
  ar(text);
  options = Options::fields().from_json(nlohmann::json::parse(text));
}

}  // namespace ooze
