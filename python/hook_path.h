// What a hook flag's value names, decided by its spelling alone (so a wrong path fails at
// start-up, before anything runs):
//
//   nonzero_std, sft, math            a built-in (no '.', ':' or '/')
//   path/to/lib.so:function           a C++ plugin (rollout/reward_plugin.h)
//   package.module.function           a Python function, imported from sys.path
//   package.module:function           the same
//   path/to/file.py:function          a Python function from that file
#pragma once

#include <string>

namespace ooze::python {

enum class HookPathKind { kBuiltin, kSharedLibrary, kPython };

HookPathKind hook_path_kind(const std::string& path);

// `path` with a relative file made absolute against the working directory
// (my_loss.py:fn -> /run/dir/my_loss.py:fn), so that processes started elsewhere (trainer ranks
// on other nodes, or in another directory) load the file the command was given. Other spellings
// come back as they are: modules resolve from each process's sys.path.
std::string with_absolute_file(const std::string& path);

}  // namespace ooze::python
