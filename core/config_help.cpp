// ConfigSchema::help(): the field reference `--help` and `ooze config-help` print.
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
std::string usage(const FieldSpec& spec) {
  switch (spec.type) {
    case FieldType::kBool:
      return "--[no-]" + dashes(spec.name);
    case FieldType::kEnum:
      return spec.flag() + " {" + join(spec.choices, ",") + "}";
    default:
      return spec.flag() + " <" + field_type_name(spec.type) + ">";
  }
}

// "default: 32; range: >= 1", or "required".
std::string facts(const FieldSpec& spec) {
  std::string text = spec.is_required             ? "required"
                     : !spec.default_text.empty() ? "default: " + spec.default_text
                                                  : "default: " + spec.default_value.dump();
  if (!spec.range_text().empty()) text += "; range: " + spec.range_text();
  return text;
}

}  // namespace

std::string ConfigSchema::help() const {
  std::ostringstream out;
  out << "Every flag is also a JSON key with underscores (--global-batch-size -> "
         "global_batch_size).\nPrecedence: default < config file < flags (later flags win).\n";
  // Section by section, so each module's fields read together even when a schema declares a
  // section in several places.
  for (const auto& section : sections()) {
    out << "\n" << section << ":\n";
    for (const auto& spec : fields_) {
      if (spec.section != section) continue;
      const std::string typed = usage(spec);
      out << "  " << typed;
      if (typed.size() < kUsageWidth) {
        out << std::string(kUsageWidth - typed.size(), ' ');
      } else {
        out << "\n  " << std::string(kUsageWidth, ' ');
      }
      out << facts(spec) << "\n" << wrap(spec.doc, kDocIndent, kLineWidth);
    }
  }
  return out.str();
}

}  // namespace ooze
