"""Workdirs of the binaries: resolved config, protocol, and resume checks.

Every binary writes `config.json` (the resolved config) and `protocol.json`
into its workdir. Running again in the same workdir resumes; a config that
differs in any field but the `ignore`d ones (budgets, cadences) is refused
with the differences, because resuming it would mix two experiments.

Fields added to a config later are missing from older workdirs' config.json
and count as differences, so a run made before a change of meaning is never
continued under the new meaning. Where the new field has a value that
reproduces the old behaviour exactly (`legacy`, e.g. the agents'
loss.reward_clipping='none'; every protocol field at its Protocol default),
passing that value resumes the old run, and config.json gains the field:
the documented upgrade path (docs/agents.md).

Every preparation also appends this invocation to `run_info.json`
(`record_run_info`): the software stack's versions, the git commit of the
code (and whether the checkout had uncommitted changes), the command line,
host, CPU flags, GPUs, the resolved precision and the start time; earlier
invocations (resumes) are kept.

A run also records what it ran on in `identity.json`: the fingerprint of
its dataset (pretraining) or of its envmodel export (agents, the planner).
A resume with other data or another export is refused naming both
fingerprints; a workdir made before identities were recorded gains its
record on the first resume (the same legacy path as config fields). Every
check (config, protocol, identity) runs before the first byte is written,
so a refused run leaves the workdir as it was (README.md, "Guarantees").
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import socket
import subprocess
import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from absl import logging
import ml_collections
import tensorflow as tf

from envmodels import precision
from envmodels import versions
from i2a import io_utils
from i2a.environments import Protocol

CONFIG = "config.json"
PROTOCOL = "protocol.json"
PRECISION = "precision.json"
# Config fields that change how fast a run computes, never what: a resumed
# run may change them (and configs made before them resume as they are).
COMPUTE_ONLY = ("threads",)
IDENTITY = "identity.json"
RUN_INFO = "run_info.json"
# The distributions whose versions run_info.json records (python too).
STACK = ("tensorflow", "tensorflow-probability", "dm-sonnet", "dm-reverb",
         "numpy", "gymnasium", "ale-py")
# CPU flags that decide the precision and speed (envmodels/precision.py).
CPU_FLAGS = ("avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
# The checkout the code runs from, if it is one.
_CODE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Identity:
  """What a run ran on, by content: recorded in WORKDIR/identity.json.

  Attributes:
    what: a human name, e.g. 'dataset' or 'envmodel export'.
    fingerprint: a content hash (files.dataset_fingerprint,
      envmodels.fingerprint).
    path: where it was read from (informative: a moved copy has the same
      fingerprint and resumes).
    flag: the command-line flag that names it, e.g. '--config.data'.
    aliases: fingerprints of the same content under an earlier definition
      (files.legacy_dataset_fingerprint): a workdir that recorded one
      resumes, and records `fingerprint` from then on. Never written.
  """
  what: str
  fingerprint: str
  path: str
  flag: str
  aliases: Tuple[str, ...] = ()

  def to_json(self) -> Dict[str, str]:
    return dict(what=self.what, fingerprint=self.fingerprint, path=self.path,
                flag=self.flag)


def protocol_from_config(config: ml_collections.ConfigDict) -> Protocol:
  """The Protocol in `config.protocol`, validated (ValueError if not)."""
  fields = config.protocol.to_dict()
  return Protocol.from_json(fields)


def config_differences(old: Dict[str, Any], new: Dict[str, Any],
                       ignore: Iterable[str] = (),
                       legacy: Optional[Mapping[str, Any]] = None
                       ) -> Dict[str, Any]:
  """{field: (old, new)} for fields that differ, except `ignore` prefixes
  and fields missing from `old` whose new value is their `legacy` value
  (the one that reproduces runs made before the field existed)."""
  old_flat, new_flat = io_utils.flatten(old), io_utils.flatten(new)
  ignore, legacy = tuple(ignore), dict(legacy or {})
  return {k: (old_flat.get(k), new_flat.get(k))
          for k in sorted(set(old_flat) | set(new_flat))
          if old_flat.get(k) != new_flat.get(k) and not k.startswith(ignore)
          and not (k not in old_flat and k in legacy and
                   new_flat.get(k) == legacy[k])}


def prepare_workdir(workdir: str, config: ml_collections.ConfigDict,
                    protocol: Optional[Protocol],
                    ignore: Iterable[str] = (),
                    legacy: Optional[Mapping[str, Any]] = None,
                    identity: Optional[Mapping[str, Identity]] = None) -> str:
  """Creates/validates `workdir`, writes config.json, protocol.json and
  identity.json once `check_workdir` passes (nothing is written before);
  then also removes the stale temporaries of killed runs
  (io_utils.remove_stale_temporaries) before writing, and appends this
  invocation to run_info.json (`record_run_info`). Returns the absolute
  workdir."""
  identities = check_workdir(workdir, config, protocol, ignore, legacy,
                             identity)
  workdir = io_utils.ensure_writable_dir(workdir)
  io_utils.remove_stale_temporaries(workdir)  # a killed run's half-writes
  config_dict = config.to_dict()
  io_utils.atomic_write_json(os.path.join(workdir, CONFIG),
                             _jsonable(config_dict))
  if "precision" in config:  # what it means on this machine (use_precision)
    io_utils.atomic_write_json(os.path.join(workdir, PRECISION), dict(
        requested=config.precision, resolved=precision.current(),
        cpu_has_bf16=precision.cpu_has_bf16(),
        auto_pinned=precision.auto_pin() or None,  # I2A_AUTO_PRECISION
        **precision.threads_record(config.get("threads",
                                              precision.THREADS_AUTO))))
  if protocol is not None:
    io_utils.atomic_write_json(os.path.join(workdir, PROTOCOL),
                               protocol.to_json())
  if identity:
    io_utils.atomic_write_json(os.path.join(workdir, IDENTITY), identities)
  record_run_info(workdir)
  return workdir


def check_workdir(workdir: str, config: ml_collections.ConfigDict,
                  protocol: Optional[Protocol],
                  ignore: Iterable[str] = (),
                  legacy: Optional[Mapping[str, Any]] = None,
                  identity: Optional[Mapping[str, Identity]] = None
                  ) -> Dict[str, Any]:
  """Checks that a run of `config` may start or resume in `workdir`;
  writes nothing (the workdir need not exist). Returns the identity.json
  record to write.

  Raises ValueError when the workdir holds a run whose config differs
  (outside `ignore`d fields such as budgets that may grow on resume, and
  fields added since that the new config sets to their `legacy` value),
  whose protocol.json differs from `protocol`, or whose identity.json
  records another fingerprint for a name in `identity` (names it does not
  record yet, e.g. in a workdir made before identities, are added).
  """
  workdir = os.path.abspath(os.path.expanduser(workdir))
  config_dict = config.to_dict()
  path = os.path.join(workdir, CONFIG)
  traces = [name for name in (PROTOCOL, "checkpoints", "metrics.csv")
            if os.path.exists(os.path.join(workdir, name))]
  if not os.path.exists(path) and traces:
    raise ValueError(
        f"workdir {workdir} holds a run ({', '.join(traces)}) but no "
        f"{CONFIG}, so it cannot be checked against the new config. Restore "
        f"{CONFIG}, or use another --workdir / delete this one to start "
        "over.")
  if os.path.exists(path):
    try:
      previous = io_utils.read_json(path)
    except (ValueError, OSError) as e:
      # Never a fresh run: the resume guard would be off.
      raise ValueError(
          f"{path} is unreadable ({e}), so this workdir's run cannot be "
          "checked against the new config. Restore the file (it is the "
          "resolved config the run was started with), or use another "
          "--workdir / delete this one to start over.") from e
    if not isinstance(previous, dict):
      raise ValueError(f"{path} holds {type(previous).__name__}, not a "
                       "config; restore it or use another --workdir.")
    # A protocol field added since ran at its default: the same experiment.
    legacy = {**{f"protocol.{key}": value for key, value in
                 _jsonable(Protocol().to_json()).items()}, **(legacy or {})}
    diff = config_differences(previous, _jsonable(config_dict),
                              tuple(ignore) + COMPUTE_ONLY, legacy)
    if diff:
      raise ValueError(_difference_message(workdir, diff, legacy))
  identities = check_identity(workdir, dict(identity or {}))
  check_protocol_file(workdir, protocol)
  return identities


def _read_record(path: str, what: str) -> Any:
  try:
    return io_utils.read_json(path)
  except (ValueError, OSError) as e:
    raise ValueError(
        f"{path} is unreadable ({e}), so this workdir's {what} cannot be "
        "checked. Restore the file, or use another --workdir / delete this "
        "one to start over.") from e


def check_protocol_file(workdir: str, protocol: Optional[Protocol]) -> None:
  """ValueError if WORKDIR/protocol.json records another protocol than
  `protocol` (a resume would step other environments). Writes nothing."""
  path = os.path.join(workdir, PROTOCOL)
  if protocol is None or not os.path.exists(path):
    return
  recorded = _read_record(path, "protocol")
  try:
    previous = Protocol.from_json(recorded)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{path} holds no valid protocol ({e}); restore it or "
                     "use another --workdir.") from e
  diff = previous.differences(protocol)
  if diff:
    lines = "\n".join(f"  protocol.{key}: {old!r} -> {new!r}"
                      for key, (old, new) in diff.items())
    raise ValueError(
        f"workdir {workdir} holds a run under another protocol "
        f"({PROTOCOL}); resuming would mix two experiments:\n{lines}\n"
        "Use another --workdir, or pass the data/config of the original "
        "run.")


def check_identity(workdir: str, identity: Mapping[str, Identity],
                   recording: bool = True) -> Dict[str, Any]:
  """The identity.json record with `identity` merged in; ValueError naming
  both fingerprints if the workdir recorded another one for a name. A name
  not recorded yet (a workdir made before identity.json) is added: the
  legacy path (`recording`: the caller writes the result). Writes
  nothing."""
  path = os.path.join(workdir, IDENTITY)
  recorded: Dict[str, Any] = {}
  if os.path.exists(path):
    recorded = _read_record(path, "identity (what the run ran on)")
    if not isinstance(recorded, dict):
      raise ValueError(f"{path} holds {type(recorded).__name__}, not an "
                       "identity record; restore it or use another "
                       "--workdir.")
  merged = dict(recorded)
  for name, new in identity.items():
    old = recorded.get(name)
    if (isinstance(old, dict) and
        old.get("fingerprint") not in (new.fingerprint, *new.aliases)):
      raise ValueError(
          f"workdir {workdir} ran on another {new.what}: it recorded "
          f"fingerprint {old.get('fingerprint')} ({old.get('path')}), "
          f"{new.flag}={new.path} has fingerprint {new.fingerprint}. "
          f"Resuming would mix two experiments. Use a new --workdir for "
          f"this {new.what}, or restore the original {new.what} "
          f"({old.get('path')}) and pass it again.")
    if (recording and old is None and
        os.path.exists(os.path.join(workdir, CONFIG))):
      logging.warning("workdir %s was made before %s recorded identities: "
                      "recording the %s fingerprint %s of %s now.", workdir,
                      IDENTITY, new.what, new.fingerprint, new.path)
    merged[name] = new.to_json()
  return merged


def checkpoint_damage(path: str) -> Optional[str]:
  """None when every tensor of the TF checkpoint `path` (a prefix, as in
  CheckpointManager.checkpoints) reads back; else what is wrong with it.

  A run killed while saving, or a damaged disk, leaves a checkpoint that
  cannot be restored: resuming code skips it for the newest intact one.
  """
  try:
    reader = tf.train.load_checkpoint(path)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except Exception as e:  # pylint: disable=broad-except  (any damage)
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
  return None


def _git(*args: str) -> Optional[str]:
  try:
    result = subprocess.run(["git", "-C", _CODE_ROOT, *args],
                            capture_output=True, text=True, timeout=10,
                            check=False)
  except (OSError, subprocess.SubprocessError):
    return None
  return result.stdout.strip() if result.returncode == 0 else None


def git_state() -> Optional[Dict[str, Any]]:
  """{"commit", "dirty"} of the git checkout the code runs from (dirty:
  tracked files differ from the commit); None when the code is not in a
  checkout of its own (an installed package) or git is missing."""
  top = _git("rev-parse", "--show-toplevel")
  if top is None or os.path.realpath(top) != os.path.realpath(_CODE_ROOT):
    return None
  commit = _git("rev-parse", "HEAD")
  status = _git("status", "--porcelain", "--untracked-files=no")
  if commit is None or status is None:
    return None
  return dict(commit=commit, dirty=bool(status))


def run_info() -> Dict[str, Any]:
  """This invocation: what ran, where, on what, with which code."""
  flags = precision.cpu_flags()
  return dict(
      started=datetime.datetime.now(datetime.timezone.utc).isoformat(
          timespec="seconds"),
      command=[sys.executable] + sys.argv,
      cwd=os.getcwd(),
      hostname=socket.gethostname(),
      python=platform.python_version(),
      packages={name: versions.installed_version(name) for name in STACK},
      git=git_state(),
      cpu=dict(machine=platform.machine(), cpus=os.cpu_count(),
               flags={name: name in flags for name in CPU_FLAGS}),
      gpus=[gpu.name for gpu in tf.config.list_physical_devices("GPU")],
      precision=precision.current(),
      threads=precision.threads_record(),  # the pools this process runs
      deterministic=_op_determinism())


def _op_determinism() -> bool:
  try:
    return bool(tf.config.experimental.is_op_determinism_enabled())
  except AttributeError:  # not in this TensorFlow
    return False


def record_run_info(workdir: str) -> List[Dict[str, Any]]:
  """Appends `run_info()` to WORKDIR/run_info.json ({"invocations":
  [...]}, oldest first; written atomically). An unreadable file is set
  aside as run_info.json.unreadable rather than lost or fatal. Returns the
  invocations."""
  path = os.path.join(workdir, RUN_INFO)
  invocations: List[Dict[str, Any]] = []
  if os.path.exists(path):
    try:
      invocations = list(io_utils.read_json(path)["invocations"])
    except (OSError, ValueError, KeyError, TypeError) as e:
      logging.warning("%s is unreadable (%s); kept as %s.unreadable and "
                      "started anew.", path, e, path)
      os.replace(path, path + ".unreadable")
      invocations = []
  invocations.append(run_info())
  io_utils.atomic_write_json(path, dict(invocations=invocations))
  return invocations


def use_precision(config: ml_collections.ConfigDict) -> str:
  """Computes in `config.precision` from now on (envmodels/precision.py;
  configs made before the field existed ran in fp32), with TensorFlow's
  thread pools sized by `config.threads` ('auto' where absent); ValueError
  for a precision this machine cannot run or malformed threads. Call it
  first thing, before `prepare_workdir`, which records both in
  WORKDIR/precision.json. Returns the precision."""
  precision.set_threads(config.get("threads", precision.THREADS_AUTO))
  return precision.set_precision(config.get("precision", "fp32"))


def _difference_message(workdir: str, diff: Dict[str, Any],
                        legacy: Mapping[str, Any]) -> str:
  lines = []
  for key, (old, new) in diff.items():
    line = f"  {key}: {old!r} -> {new!r}"
    if old is None:
      line += (" (not in the saved config: the run was made before this "
               "field existed; " +
               (f"--config.{key}={legacy[key]!r} continues it as it was)"
                if key in legacy else "its old behaviour is gone)"))
    lines.append(line)
  return (f"workdir {workdir} holds a run with a different config; resuming "
          "would mix two experiments:\n" + "\n".join(lines) + "\nUse "
          "another --workdir, or delete this one to start over.")


def _jsonable(data: Any) -> Any:
  if isinstance(data, dict):
    return {k: _jsonable(v) for k, v in data.items()}
  if isinstance(data, (list, tuple)):
    return [_jsonable(v) for v in data]
  return data

