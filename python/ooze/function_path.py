"""Finding a user's function from the path a flag gives, in Slime's spellings and two more.

    package.module.function     imported from sys.path (the working directory first)
    package.module:function     the same
    path/to/file.py:function    that file, whose directory goes first on sys.path so that it
                                can import its siblings as Slime's examples do

(``lib.so:function`` names a C++ plugin and never reaches Python.)
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys


class HookLoadError(Exception):
    """A hook path that does not name a usable function; the message says what was wrong."""


def split_path(path: str) -> tuple:
    """('file', file, function) or ('module', module, function)."""
    if ":" in path:
        where, _, name = path.rpartition(":")
        kind = "file" if where.endswith(".py") or os.sep in where else "module"
    else:
        where, _, name = path.rpartition(".")
        kind = "module"
    if not where or not name:
        raise HookLoadError(
            f"'{path}' is not a function path: write package.module.function, "
            "package.module:function or path/to/file.py:function"
        )
    return kind, where, name


def _import_file(file: str):
    full = os.path.abspath(file)
    if not os.path.isfile(full):
        raise HookLoadError(f"no file {file} (looked for {full})")
    directory = os.path.dirname(full)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    # The file's own name, as `python3 file.py` siblings would import it, unless another file
    # already took that name.
    name = os.path.splitext(os.path.basename(full))[0]
    loaded = sys.modules.get(name)
    if loaded is not None and os.path.abspath(getattr(loaded, "__file__", "") or "") == full:
        return loaded
    if loaded is not None:
        name = "ooze_hook_" + full.replace(os.sep, "_").replace(".", "_")
    spec = importlib.util.spec_from_file_location(name, full)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_function(path: str):
    """The function `path` names. Raises HookLoadError (or the module's own import error)."""
    kind, where, name = split_path(path)
    if kind == "file":
        module = _import_file(where)
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as error:
            if error.name and where.startswith(error.name):
                raise HookLoadError(
                    f"no module named '{error.name}' (searched the working directory "
                    f"{os.getcwd()}, PYTHONPATH and sys.path)"
                ) from None
            raise
    if not hasattr(module, name):
        raise HookLoadError(f"{module.__name__} ({module.__file__}) has no attribute '{name}'")
    function = getattr(module, name)
    if not callable(function):
        raise HookLoadError(f"'{name}' is of type {type(function).__name__}, not a function")
    return function
