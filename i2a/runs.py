"""Workdirs of the binaries: resolved config, protocol, and resume checks.

Every binary writes `config.json` (the resolved config) and `protocol.json`
into its workdir. Running again in the same workdir resumes; a config that
differs in a field listed as `identity` is refused with the differences,
because resuming it would mix two experiments.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, Optional

import ml_collections

from i2a import io_utils
from i2a.environments import Protocol

CONFIG = "config.json"
PROTOCOL = "protocol.json"


def protocol_from_config(config: ml_collections.ConfigDict) -> Protocol:
  """The Protocol in `config.protocol`, validated (ValueError if not)."""
  fields = config.protocol.to_dict()
  return Protocol.from_json(fields)


def _flatten(data: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
  flat = {}
  for key, value in data.items():
    if isinstance(value, dict):
      flat.update(_flatten(value, prefix + key + "."))
    else:
      flat[prefix + key] = list(value) if isinstance(value, tuple) else value
  return flat


def config_differences(old: Dict[str, Any], new: Dict[str, Any],
                       ignore: Iterable[str] = ()) -> Dict[str, Any]:
  """{field: (old, new)} for fields that differ, except `ignore` prefixes."""
  old_flat, new_flat = _flatten(old), _flatten(new)
  ignore = tuple(ignore)
  return {k: (old_flat.get(k), new_flat.get(k))
          for k in sorted(set(old_flat) | set(new_flat))
          if old_flat.get(k) != new_flat.get(k) and not k.startswith(ignore)}


def prepare_workdir(workdir: str, config: ml_collections.ConfigDict,
                    protocol: Optional[Protocol],
                    ignore: Iterable[str] = ()) -> str:
  """Creates/validates `workdir`, writes config.json and protocol.json.

  Raises ValueError when the workdir holds a run whose config differs
  (outside `ignore`d fields such as budgets that may grow on resume).
  """
  workdir = io_utils.ensure_writable_dir(workdir)
  config_dict = config.to_dict()
  path = os.path.join(workdir, CONFIG)
  if os.path.exists(path):
    try:
      previous = io_utils.read_json(path)
    except ValueError:
      previous = None
    if previous is not None:
      diff = config_differences(previous, _jsonable(config_dict), ignore)
      if diff:
        lines = "\n".join(f"  {k}: {a!r} -> {b!r}"
                          for k, (a, b) in diff.items())
        raise ValueError(
            f"workdir {workdir} holds a run with a different config; "
            f"resuming would mix two experiments:\n{lines}\nUse another "
            "--workdir, or delete this one to start over.")
  io_utils.atomic_write_json(path, _jsonable(config_dict))
  if protocol is not None:
    io_utils.atomic_write_json(os.path.join(workdir, PROTOCOL),
                               protocol.to_json())
  return workdir


def _jsonable(data: Any) -> Any:
  if isinstance(data, dict):
    return {k: _jsonable(v) for k, v in data.items()}
  if isinstance(data, (list, tuple)):
    return [_jsonable(v) for v in data]
  return data
