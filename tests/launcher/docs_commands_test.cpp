// Every `ooze ...` command line the documentation shows parses: README.md, docs/*.md and
// examples/**/*.md, in code blocks (continued lines joined) and in inline code. The command must
// exist and take every flag the line gives it, by the flag tables the binary itself parses with
// (launcher/commands.h), so a renamed or removed flag fails here until the docs follow.
// Placeholders (COMMAND, --FIELD, ...) are skipped; values are not checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/commands.h"

#ifndef OOZE_SOURCE_DIR
#error "OOZE_SOURCE_DIR (the repository) must be defined by the build"
#endif

namespace ooze::launcher {
namespace docs_commands_test {

namespace fs = std::filesystem;

struct CommandLine {
  std::string where;               // "docs/train.md:9"
  std::vector<std::string> words;  // from the word after `ooze` on
};

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  std::string word;
  while (in >> word) words.push_back(word);
  return words;
}

// `word` names the program: ooze, build/launcher/ooze, "$BUILD_DIR"/launcher/ooze, ...
bool is_ooze(std::string word) {
  word.erase(std::remove(word.begin(), word.end(), '"'), word.end());
  return word == "ooze" || (word.size() > 5 && word.compare(word.size() - 5, 5, "/ooze") == 0);
}

// Words a shell command may start after; `ooze` after any other word is prose or Python
// (`from ooze import Sample`).
bool starts_command(const std::string& word) {
  static const std::vector<std::string> separators = {
      "|", "||", "&&", ";", "$", "(", "$(", "exec", "time", "nohup", "sudo", "then", "do", "!"};
  if (std::find(separators.begin(), separators.end(), word) != separators.end()) return true;
  return word.find('=') != std::string::npos && word.find("--") != 0;  // VAR=value
}

// The ooze commands of one shell line (several when joined by && or |).
void collect(const std::string& line, const std::string& where, std::vector<CommandLine>& out) {
  const std::vector<std::string> words = split_words(line);
  for (size_t i = 0; i < words.size(); ++i) {
    if (!is_ooze(words[i]) || (i > 0 && !starts_command(words[i - 1]))) continue;
    CommandLine command{where, {}};
    for (size_t j = i + 1; j < words.size(); ++j) {
      const std::string& word = words[j];
      if (word == "|" || word == "||" || word == "&&" || word == ";" || word == "#" ||
          word[0] == '<' || word[0] == '>' || word == "2>&1" || word == "&") {
        break;
      }
      command.words.push_back(word);
    }
    out.push_back(std::move(command));
  }
}

std::vector<CommandLine> command_lines(const fs::path& file, const std::string& shown_as) {
  std::vector<CommandLine> found;
  std::ifstream in(file);
  std::string line, joined;
  bool in_code = false;
  int number = 0, joined_from = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find("```") != std::string::npos && line.find_first_not_of(' ') == line.find("```")) {
      in_code = !in_code;
      joined.clear();
      continue;
    }
    const std::string where = shown_as + ":" + std::to_string(number);
    if (in_code) {
      if (joined.empty()) joined_from = number;
      const bool continued = !line.empty() && line.back() == '\\';
      joined += " " + (continued ? line.substr(0, line.size() - 1) : line);
      if (continued) continue;
      collect(joined, shown_as + ":" + std::to_string(joined_from), found);
      joined.clear();
      continue;
    }
    // Inline code: `ooze ...` spans.
    for (size_t open = line.find('`'); open != std::string::npos;) {
      const size_t close = line.find('`', open + 1);
      if (close == std::string::npos) break;
      const std::string span = line.substr(open + 1, close - open - 1);
      if (span.rfind("ooze ", 0) == 0) collect(span, where, found);
      open = line.find('`', close + 1);
    }
  }
  return found;
}

// A placeholder rather than a name: COMMAND, ..., <x>, [x].
bool is_placeholder(const std::string& word) {
  return word.empty() || word == "..." ||
         std::any_of(word.begin(), word.end(), [](char c) { return std::isupper(c); }) ||
         word[0] == '<' || word[0] == '[' || word[0] == '{';
}

// Empty when the command line parses, else why not.
std::string check(const CommandLine& line) {
  if (line.words.empty() || is_placeholder(line.words[0])) return "";
  std::string name = line.words[0];
  if (name.back() == ':') return "";  // a line of output ("ooze serve: listening on ...")
  size_t first_argument = 1;
  if (name == "model" && line.words.size() > 1) {
    name += " " + line.words[1];
    first_argument = 2;
  }
  if (name == "help") return "";
  if (name == "config-help") {
    if (line.words.size() < 2 || is_placeholder(line.words[1]) || line.words[1][0] == '[') {
      return "";
    }
    std::string wanted = line.words[1];
    if (wanted == "model" && line.words.size() > 2) wanted += " " + line.words[2];
    return find_command(wanted) != nullptr ? "" : "config-help of no command '" + wanted + "'";
  }
  const Command* command = find_command(name);
  if (command == nullptr) return "no command '" + name + "'";
  const ConfigSchema& schema = command->schema();
  for (size_t i = first_argument; i < line.words.size(); ++i) {
    std::string word = line.words[i];
    // "[--flag", "(--flag", "--[no-]flag", "--flag=value", "--flag,"
    word.erase(0, word.find_first_not_of("[(\"'"));
    if (word.rfind("--", 0) != 0) continue;
    std::string flag = word.substr(2);
    if (flag.rfind("[no-]", 0) == 0) flag = flag.substr(5);
    flag = flag.substr(0, flag.find('='));
    while (!flag.empty() && !std::isalnum(static_cast<unsigned char>(flag.back()))) {
      flag.pop_back();
    }
    if (flag.empty() || is_placeholder(flag) || flag == "help" || flag == "config") continue;
    if (!schema.takes_flag(flag)) return "ooze " + name + " has no flag --" + flag;
  }
  return "";
}

TEST(DocsCommandsTest, EveryOozeCommandLineInTheDocsParses) {
  const fs::path root = OOZE_SOURCE_DIR;
  std::vector<fs::path> files = {root / "README.md"};
  for (const auto& entry : fs::directory_iterator(root / "docs")) {
    if (entry.path().extension() == ".md") files.push_back(entry.path());
  }
  for (const auto& entry : fs::recursive_directory_iterator(root / "examples")) {
    if (entry.path().extension() == ".md") files.push_back(entry.path());
  }
  size_t checked = 0;
  std::vector<std::string> commands_seen;
  for (const fs::path& file : files) {
    for (const CommandLine& line : command_lines(file, fs::relative(file, root).string())) {
      ++checked;
      if (!line.words.empty()) commands_seen.push_back(line.words[0]);
      const std::string problem = check(line);
      std::string shown;
      for (const std::string& word : line.words) shown += " " + word;
      EXPECT_EQ(problem, "") << line.where << ": ooze" << shown;
    }
  }
  // The docs show these; finding none would mean the scan itself broke.
  EXPECT_GT(checked, 50u);
  for (const char* name : {"train", "serve", "router", "rollout", "reward", "plot", "start"}) {
    EXPECT_NE(std::find(commands_seen.begin(), commands_seen.end(), name), commands_seen.end())
        << name;
  }
}

// The check itself: a wrong command or flag is caught, and what is not a command is left alone.
TEST(DocsCommandsTest, TheCheckCatchesWhatIsWrong) {
  auto problem = [](const std::string& text) {
    std::vector<CommandLine> found;
    collect(text, "here", found);
    return found.empty() ? std::string("(no command)") : check(found.front());
  };
  EXPECT_EQ(problem("ooze train --global-batch-size 8 --[no-]colocate --lr=1e-6"), "");
  EXPECT_EQ(problem("OUT=x ooze serve --model-path M | tee log"), "");
  EXPECT_EQ(problem("ooze model init --arch qwen3 --out DIR"), "");
  EXPECT_EQ(problem("ooze trian --lr 1"), "no command 'trian'");
  EXPECT_EQ(problem("ooze serve --global-batch-size 8"),
            "ooze serve has no flag --global-batch-size");
  EXPECT_EQ(problem("ooze config-help sft-demo"), "config-help of no command 'sft-demo'");
  EXPECT_EQ(problem("from ooze import Sample"), "(no command)");
  EXPECT_EQ(problem("ooze COMMAND --FIELD VALUE"), "");
}

}  // namespace docs_commands_test
}  // namespace ooze::launcher
