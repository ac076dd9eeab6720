"""The command line every binary shares (python -m i2a.NAME, i2a-NAME).

Where it sits: between the shell and a binary's `main`. A binary defines
its --config with `DEFINE_config_file`, starts `main` with `start(...)` and
runs with `run(main, __name__)` (its console-script entry calls the same).

  * Config files: `configs/...` paths resolve relative to the current
    directory when they exist there, else relative to the installed
    package (`find_config_file`), so every binary runs from any directory
    with its default config; a user's own relative path stays relative to
    the current directory.
  * --print_config: prints the resolved config (file, preset, overrides
    applied) and the binary's flags as JSON and exits 0, writing nothing.
  * --deterministic: `tf.config.experimental.enable_op_determinism()`.
  * Clear errors: a --config.FIELD override the config does not have, a
    config file that does not load, and a run the runtime refuses (a
    ValueError that explains itself: a workdir holding another run, an
    unusable export or dataset, a protocol mismatch) end in one `error:`
    paragraph and exit status 1 instead of a traceback (`parse_flags`,
    `reports_errors`, both applied by `run`).
  * Devices: every GPU gets memory growth (`setup_devices`). (The quiet
    TensorFlow import happens earlier, on `import i2a`: i2a/startup.py.)
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

from absl import app, flags, logging
from ml_collections import config_flags

import configs

# The directory holding the configs package (the repository root in a
# checkout, site-packages in an installation).
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(
    configs.__file__)))

PRINT_CONFIG = flags.DEFINE_bool(
    "print_config", False, "Print the resolved config (file, preset and "
    "overrides applied) and the flags as JSON, and exit 0 without writing "
    "anything.")
DETERMINISTIC = flags.DEFINE_bool(
    "deterministic", False, "Deterministic TensorFlow ops "
    "(tf.config.experimental.enable_op_determinism; slower, and some ops "
    "then raise instead of running nondeterministically).")


# -- Config files ---------------------------------------------------------------


def find_config_file(path: str) -> str:
  """`path` where it exists (absolute, or relative to the current
  directory), else the same relative path under PACKAGE_ROOT (the default
  `configs/...` files of an installed package). ValueError (saying where
  it looked) when it is in neither."""
  expanded = os.path.expanduser(path)
  if os.path.isabs(expanded) or os.path.exists(expanded):
    if not os.path.isfile(expanded):
      raise ValueError(f"config file {path!r} is not a file; give a Python "
                       "file defining get_config(preset), e.g. "
                       "configs/agents/a2c.py:tiny.")
    return expanded
  in_package = os.path.join(PACKAGE_ROOT, expanded)
  if os.path.isfile(in_package):
    return in_package
  raise ValueError(
      f"config file {path!r} not found: neither in the current directory "
      f"({os.getcwd()}) nor in the installed package ({PACKAGE_ROOT}). Give "
      "an existing file, e.g. configs/agents/a2c.py:tiny (the package's "
      "configs are found from any directory).")


def split_spec(spec: str) -> tuple:
  """'configs/x.py:preset' -> ('configs/x.py', 'preset') (as
  ml_collections splits it: at the first colon)."""
  path, _, preset = spec.partition(":")
  return path, preset


def resolve_spec(spec: str) -> str:
  """'PATH[:preset]' with PATH resolved by `find_config_file`."""
  path, preset = split_spec(spec)
  return find_config_file(path) + (f":{preset}" if preset else "")


_MODULES: Dict[str, Any] = {}  # resolved path -> loaded config module


def load_module(path: str) -> Any:
  """The config file at `path` (found by `find_config_file`) as a module,
  loaded once per process."""
  resolved = os.path.abspath(find_config_file(path))
  module = _MODULES.get(resolved)
  if module is None:
    name = "_i2a_config_" + re.sub(r"\W", "_", resolved)
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _MODULES[resolved] = module
  return module


def load_config_file(spec: str) -> Any:
  """`get_config(preset)` of the config file 'PATH[:preset]', found and
  split as the --config flags do (for configs named inside other configs,
  e.g. a sweep grid's runs). ValueError for a missing file or one without
  get_config."""
  path, preset = split_spec(spec)
  module = load_module(path)
  if not hasattr(module, "get_config"):
    raise ValueError(f"config file {path} defines no get_config(preset).")
  return module.get_config(preset) if preset else module.get_config()


def describe_config_file(spec: str, flag_name: str = "config") -> str:
  """The presets and top-level keys of a config file, for --help."""
  path, _ = split_spec(spec)
  try:
    module = load_module(path)
    config = load_config_file(spec)
  except Exception as e:  # pylint: disable=broad-except
    return f" ({path} could not be read: {e})"
  text = ""
  presets = getattr(module, "PRESETS", None)
  if presets:
    text += (f" Presets of {path}: {', '.join(presets)} "
             f"(--{flag_name}={path}:PRESET).")
  keys = list(config.keys()) if hasattr(config, "keys") else []
  if keys:
    text += (f" Keys: {', '.join(keys)}; set any with "
             f"--{flag_name}.KEY=VALUE (nested: --{flag_name}.A.B=VALUE); "
             "--print_config shows every resolved value.")
  return text


class _ConfigFileParser(config_flags.config_flags.ConfigFileFlagParser):
  """ml_collections' config file parser, with `find_config_file` paths."""

  def parse(self, path):  # pylint: disable=arguments-renamed
    return super().parse(resolve_spec(path))


def _calling_module_name(depth: int = 2) -> str:
  """The module name absl files a flag under (sys.argv[0] for __main__)."""
  name = sys._getframe(depth).f_globals.get("__name__", "")  # pylint: disable=protected-access
  return sys.argv[0] if name == "__main__" else name


def DEFINE_config_file(name: str, default: Optional[str],  # pylint: disable=invalid-name
                       help_string: str) -> flags.FlagHolder:
  """ml_collections' --NAME=FILE[:preset] flag (with --NAME.KEY=VALUE
  overrides) whose FILE resolves by `find_config_file` and whose help lists
  the default file's presets and keys."""
  if default:
    help_string += describe_config_file(default, name)
    _CONFIG_FLAGS[name] = default
  module_name = _calling_module_name()
  try:  # ml_collections applies the command line's overrides right here
    flag = config_flags.config_flags._ConfigFlag(  # pylint: disable=protected-access
        parser=_ConfigFileParser(name=name, lock_config=True),
        serializer=flags.ArgumentSerializer(), name=name, default=default,
        help_string=help_string, flag_values=flags.FLAGS)
  except (AttributeError, KeyError) as e:
    sys.exit("error: " + _bad_override(sys.argv, e))
  return flags.DEFINE_flag(flag, flags.FLAGS, module_name=module_name)


def require_unless_print_config(holder: flags.FlagHolder) -> None:
  """Makes --NAME required except with --print_config (which writes
  nothing, so needs no workdir)."""
  flags.register_multi_flags_validator(
      [holder.name, PRINT_CONFIG.name],
      lambda values: (values[holder.name] is not None or
                      values[PRINT_CONFIG.name]),
      message=f"--{holder.name} is required (or use --print_config).")


# -- Clear errors ----------------------------------------------------------------

# The config flags DEFINE_config_file defined: name -> default FILE[:preset].
_CONFIG_FLAGS: Dict[str, str] = {}


def _config_argument(argv: List[str], name: str) -> str:
  for arg in argv:
    match = re.match(rf"^-{{1,2}}{name}=(.*)$", arg)
    if match:
      return match.group(1)
  flag = flags.FLAGS[name]
  return str(flag.default if isinstance(flag.default, str) else "")


def _bad_override(argv: List[str], error: BaseException) -> str:
  """The clear message for a --config.FIELD override the config lacks."""
  text = str(error)
  given = [arg.split("=", 1)[0].lstrip("-") for arg in argv
           if re.match(r"^-{1,2}(no)?\w+\.", arg)]
  found = [(g, part) for g in given for part in g.split(".")[1:]
           if re.search(rf"\b{re.escape(part)}\b", text)]
  culprits = [g for g, _ in found] or given
  key = found[0][1] if found else text
  hint = re.search(r'Did you mean \W*"?(\w+)', text)
  return (f"unknown config field: {', '.join('--' + c for c in culprits)} "
          f"names {key!r}, which the config file does not have"
          + (f" (did you mean {hint.group(1)!r}?)" if hint else "") +
          ". Check the spelling and the nesting (e.g. "
          "--config.loss.entropy_coef); --print_config shows every field "
          "of this config.")


def _check_config_flags(argv: List[str]) -> None:
  """Raises app.UsageError for a config flag whose file did not load."""
  for name, default in _CONFIG_FLAGS.items():
    flag = flags.FLAGS[name]
    try:
      getattr(flag.value, "to_dict")
    except (IOError, OSError, ValueError, ImportError, SyntaxError) as e:
      argument = _config_argument(argv, name)
      detail = re.sub(r"^Configuration is not available because of an "
                      r"earlier failure to load: ", "", str(e)).strip()
      raise app.UsageError(
          f"--{name}={argument} cannot be loaded: {detail}\nPass a config "
          "file[:preset] that exists (relative to the current directory, "
          "or a configs/... path of the installed package), e.g. "
          f"--{name}={default}.") from None


def parse_flags(argv: List[str]) -> List[str]:
  """absl's flag parsing with clear errors for a --config.FIELD override
  the config lacks and a config file that does not load, instead of a
  traceback."""
  try:
    remaining = flags.FLAGS(argv)
  except flags.Error as e:
    sys.exit(f"error: {e}\nPass --helpfull to list the flags.")
  except (AttributeError, KeyError) as e:
    sys.exit("error: " + _bad_override(argv, e))
  try:
    _check_config_flags(argv)
  except app.UsageError as e:
    sys.exit(f"error: {e}")
  return remaining


def reports_errors(main: Callable[..., Any]) -> Callable[..., Any]:
  """Wraps a binary's main: a refused run (ValueError: a user mistake the
  runtime explains, e.g. an ExportError or a workdir that holds another
  run) exits with status 1 and its message, not a traceback (which goes to
  the log at debug level)."""
  @functools.wraps(main)
  def wrapper(*args, **kwargs):
    try:
      return main(*args, **kwargs)
    except ValueError as e:
      logging.debug("refused", exc_info=True)
      sys.exit(f"error: {e}")
  return wrapper


# -- Start-up --------------------------------------------------------------------


def setup_devices(deterministic: bool = False) -> List[str]:
  """Memory growth for every GPU (a process takes what it uses, not the
  whole card, so several processes share one) and, if asked, deterministic
  ops. A no-op on a CPU-only machine. Returns the GPUs' names."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  gpus = tf.config.list_physical_devices("GPU")
  for gpu in gpus:
    try:
      tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as e:  # the GPU was initialised already
      logging.warning("memory growth not set for %s: %s", gpu.name, e)
  if deterministic:
    tf.config.experimental.enable_op_determinism()
  return [gpu.name for gpu in gpus]


def _jsonable_config(config: Any) -> Any:
  if config is None:
    return None
  if hasattr(config, "to_json_best_effort"):
    return json.loads(config.to_json_best_effort())
  return json.loads(json.dumps(config, default=str))


def print_config(config_flag: Optional[flags.FlagHolder] = None,
                 holders: Sequence[flags.FlagHolder] = (),
                 extra: Optional[Dict[str, Any]] = None) -> str:
  """The JSON --print_config prints: {"config_file", "config", "flags"}."""
  data: Dict[str, Any] = {}
  if config_flag is not None:
    try:
      given = flags.FLAGS[config_flag.name].config_filename
    except config_flags.config_flags.UnparsedFlagError:  # default None
      given = None
    data["config_file"] = resolve_spec(given) if given else None
    data["config"] = _jsonable_config(config_flag.value)
  data["flags"] = {h.name: h.value for h in holders}
  data["flags"]["deterministic"] = DETERMINISTIC.value
  data.update(extra or {})
  return json.dumps(data, indent=2, sort_keys=True, default=str)


def start(config_flag: Optional[flags.FlagHolder] = None,
          holders: Sequence[flags.FlagHolder] = (),
          devices: bool = True,
          extra: Optional[Dict[str, Any]] = None) -> None:
  """The first call of every binary's `main`: with --print_config prints
  the config and exits 0; otherwise sets up the devices (`devices`)."""
  if PRINT_CONFIG.value:
    print(print_config(config_flag, holders, extra), flush=True)
    sys.exit(0)
  if devices:
    setup_devices(DETERMINISTIC.value)


def run(main: Callable[[List[str]], Any], module_name: str) -> None:
  """absl's app.run(main) for the binary `module_name` (its __name__),
  whether started as `python -m i2a.NAME` or as the console script
  i2a-NAME: the latter gets the binary's docstring and flags in --help."""
  main_module = sys.modules.get("__main__")
  if module_name != "__main__" and main_module is not None:
    binary = sys.modules[module_name]
    if not getattr(main_module, "__doc__", None):
      main_module.__doc__ = binary.__doc__
    for flag in flags.FLAGS.get_key_flags_for_module(module_name):
      flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
  app.run(reports_errors(main), flags_parser=parse_flags)
