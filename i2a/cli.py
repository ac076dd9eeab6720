"""The binaries' command line: clear errors instead of tracebacks.

Every `python -m i2a.<binary>` runs `app.run(cli.reports_errors(main),
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
from typing import Any, Callable, List

from absl import app, flags, logging


def _config_argument(argv: List[str], name: str) -> str:
  for arg in argv:
    match = re.match(rf"^-{{1,2}}{name}=(.*)$", arg)
    if match:
      return match.group(1)
  flag = flags.FLAGS[name]
  return str(flag.default if isinstance(flag.default, str) else "")


def _bad_override(argv: List[str], error: BaseException) -> str:
  """The clear message for a --config.FIELD override the config lacks."""
  key = str(error.args[0] if error.args else error).strip("'\" ")
  given = [arg.split("=", 1)[0].lstrip("-") for arg in argv
           if re.match(r"^-{1,2}(no)?\w+\.", arg)]
  culprits = [g for g in given if key in g.split(".")] or given
  return (f"unknown config field: {', '.join('--' + c for c in culprits)} "
          f"names {key!r}, which the config file does not have. Check the "
          "spelling and the nesting (e.g. --config.loss.entropy_coef); "
          "--helpfull lists every --config.* field of this config.")


def _check_config_flags(argv: List[str]) -> None:
  """Raises app.UsageError for a config flag whose file did not load."""
  for name in ("config",):  # every binary's config flag
    if name not in flags.FLAGS:
      continue
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
          "from (the repository root), e.g. "
          "--config=configs/agents/a2c.py:tiny.") from None


def parse_flags(argv: List[str]) -> List[str]:
  """absl's flag parsing (app.run(main, flags_parser=runs.parse_flags)) with
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
