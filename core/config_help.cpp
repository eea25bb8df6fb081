// ConfigSchema::help(): the field reference `--help` and `ooze config-help` print.
#include <algorithm>
#include <ostream>
#include <sstream>

#include "core/config_schema.h"
#include "core/config_spelling.h"

namespace ooze {
namespace {

using config_spelling::dashes;
using config_spelling::join;

// Flags start in column 2, their facts in column 40, the doc below in column 6.
constexpr size_t kUsageWidth = 38;
constexpr size_t kLineWidth = 100;
const char* const kDocIndent = "      ";

// `text` as lines of at most `width` columns (long words excepted), each starting with `indent`.
std::string wrap(const std::string& text, const std::string& indent, size_t width) {
  std::istringstream words(text);
  std::string word, line, out;
  while (words >> word) {
    if (!line.empty() && indent.size() + line.size() + 1 + word.size() > width) {
      out += indent + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) out += indent + line + "\n";
  return out;
}

// How the flag is typed: "--[no-]colocate", "--backend {gloo,nccl}", "--lr <float>".
// "--chat-template [<string>]" when the value may be left out; "--engine <string list>..." when
// the flag repeats.
std::string usage(const FieldSpec& spec) {
  std::string value;
  switch (spec.type) {
    case FieldType::kBool:
      return "--[no-]" + dashes(spec.name);
    case FieldType::kEnum:
      value = "{" + join(spec.choices, ",") + "}";
      break;
    default:
      value = "<" + field_type_name(spec.type) + ">";
  }
  if (spec.value_when_bare) value = "[" + value + "]";
  return spec.flag() + " " + value + (spec.repeats ? "..." : "");
}

// "default: 32; range: >= 1", or "required".
std::string facts(const FieldSpec& spec, bool is_alias) {
  if (is_alias) return spec.range_text().empty() ? "" : "range: " + spec.range_text();
  std::string text = spec.is_required             ? "required"
                     : !spec.default_text.empty() ? "default: " + spec.default_text
                                                  : "default: " + spec.default_value.dump();
  if (!spec.range_text().empty()) text += "; range: " + spec.range_text();
  if (spec.value_when_bare) text += "; alone: \"" + *spec.value_when_bare + "\"";
  return text;
}

// One flag: its usage, its facts in column 40 (below when the usage is long), its doc.
void describe_flag(std::ostream& out, const FieldSpec& spec, bool is_alias) {
  const std::string typed = usage(spec);
  const std::string known = facts(spec, is_alias);
  out << "  " << typed;
  if (!known.empty()) {
    if (typed.size() < kUsageWidth) {
      out << std::string(kUsageWidth - typed.size(), ' ');
    } else {
      out << "\n  " << std::string(kUsageWidth, ' ');
    }
    out << known;
  }
  out << "\n" << wrap(spec.doc, kDocIndent, kLineWidth);
}

}  // namespace

std::string ConfigSchema::help() const {
  if (fields_.empty() && aliases_.empty()) return "It takes no flags.\n";
  // The example is one of this schema's own flags: a name with an underscore shows the spelling.
  const FieldSpec* example = &fields_.front();
  for (const auto& spec : fields_) {
    if (spec.name.find('_') != std::string::npos) {
      example = &spec;
      break;
    }
  }
  std::ostringstream out;
  out << "Every flag is also a JSON key with underscores (" << example->flag() << " -> "
      << example->name << ").\nPrecedence: default < config file < flags (later flags win).\n";
  // Section by section, so each module's fields read together even when a schema declares a
  // section in several places.
  for (const auto& section : sections()) {
    out << "\n" << section << ":\n";
    for (const auto& spec : fields_) {
      if (spec.section == section) describe_flag(out, spec, /*is_alias=*/false);
    }
  }
  // The other spellings, after the fields they set, grouped the same way.
  std::vector<std::string> alias_sections;
  for (const auto& alias : aliases_) {
    if (std::find(alias_sections.begin(), alias_sections.end(), alias.spec.section) ==
        alias_sections.end()) {
      alias_sections.push_back(alias.spec.section);
    }
  }
  for (const auto& section : alias_sections) {
    out << "\n" << section << ":\n";
    for (const auto& alias : aliases_) {
      if (alias.spec.section == section) describe_flag(out, alias.spec, /*is_alias=*/true);
    }
  }
  if (!hints_.empty()) {
    std::vector<std::string> names;
    for (const auto& [name, message] : hints_) names.push_back("--" + dashes(name));
    out << "\nRefused with what to use instead (docs/config.md):\n"
        << wrap(join(names, ", "), "  ", kLineWidth);
  }
  return out.str();
}

}  // namespace ooze
