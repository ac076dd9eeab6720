"""The binaries' command line: clear errors instead of tracebacks.

Every `python -m i2a.<binary>` defines its config flag with
`cli.define_config_file` and runs `app.run(cli.reports_errors(main),
flags_parser=cli.parse_flags)`: a --config.FIELD override the config does
not have, a config file that does not load, and a run the runtime refuses
(a ValueError that explains itself: a workdir holding another run, an
unusable export or dataset, a protocol mismatch) end in one `error:`
paragraph and exit status 1. Imports no TensorFlow (the launcher's
supervisor stays light).
"""

from __future__ import annotations

import functools
import re
import sys
from typing import Any, Callable, Dict, List

from absl import app, flags, logging
from ml_collections import config_flags


def _config_argument(argv: List[str], name: str) -> str:
  for arg in argv:
    match = re.match(rf"^-{{1,2}}{name}=(.*)$", arg)
    if match:
      return match.group(1)
  flag = flags.FLAGS[name]
  return str(flag.default if isinstance(flag.default, str) else "")


# The config flags define_config_file defined: name -> default FILE[:preset].
_CONFIG_FLAGS: Dict[str, str] = {}


def define_config_file(name: str, default: str, help_string: str) -> Any:
  """config_flags.DEFINE_config_file, with a clear error for an override
  of a field the default config lacks (ml_collections parses the default
  with the command line's overrides when the flag is defined)."""
  _CONFIG_FLAGS[name] = default
  try:
    return config_flags.DEFINE_config_file(name, default, help_string)
  except (AttributeError, KeyError) as e:
    sys.exit("error: " + _bad_override(sys.argv, e))


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
          "--config.loss.entropy_coef); --helpfull lists every --config.* "
          "field of this config.")


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
          "file[:preset] that exists, relative to the directory you run "
          f"from (the repository root), e.g. --{name}={default}.") from None


def parse_flags(argv: List[str]) -> List[str]:
  """absl's flag parsing (app.run(main, flags_parser=cli.parse_flags)) with
  clear errors for a --config.FIELD override the config lacks and a config
  file that does not load, instead of a traceback."""
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
