"""Export and load frozen environment models.

Where it sits in the data flow: `i2a.pretrain` ends with
`envmodels.export(model, WORKDIR/export)`; agents and `i2a.evaluate_models`
call `envmodels.load(export_dir)` and get a frozen `EnvModel` (no trainable
variables; gradients still flow through its activations into relaxed actions
and into an attached imagination prior).

An export directory holds
  spec.json             {"format": "envmodels.export", "format_version",
                         "kind", "spec", "hyperparameters", "variables",
                         "provenance" (optional: what the model was
                         trained on, e.g. the dataset's fingerprint and
                         protocol; i2a.pretrain records them), ...}
  variables/variables.* a tf.train.Checkpoint of the module (TensorFlow's
                         object-based checkpoint: .index + .data-*)

It is written into a temporary sibling directory and renamed into place, so
a reader never sees a half-written export. Loading rebuilds the model from
the registry with the recorded hyperparameters: no training config needed.

`fingerprint(export_dir)` is the export's identity: sha256 of spec.json (as
canonical JSON) and of every variables file. Agent runs record it in their
workdir and refuse to resume with another export (README.md,
"Guarantees"). Exports written before provenance existed load as before;
their provenance reads as unknown.

Format version policy: `FORMAT_VERSION` (envmodels.base) is bumped on any
change an older `load` could not read; `load` reads every version in
`READABLE_VERSIONS` and refuses newer ones with an `ExportError` that says to
upgrade the package.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, Dict, Mapping, Optional

import numpy as np
import sonnet as snt
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from envmodels import base
from envmodels import precision
from envmodels import registry

FORMAT_NAME = "envmodels.export"
SPEC_FILE = "spec.json"
VARIABLES_PREFIX = os.path.join("variables", "variables")
READABLE_VERSIONS = tuple(range(1, base.FORMAT_VERSION + 1))


class ExportError(ValueError):
  """An export directory that cannot be written or loaded (says why)."""


def _frozen_creator(next_creator, **kwargs):
  kwargs["trainable"] = False
  return next_creator(**kwargs)


def _nonfinite(model: base.EnvModel) -> str:
  """'' if every weight is finite, else a few of the offending names."""
  bad = [v.name for v in model.variables if v.dtype.is_floating and
         not bool(tf.reduce_all(tf.math.is_finite(v)).numpy())]
  return (f"{len(bad)} variables, e.g. {bad[:3]}" if bad else "")


def _plain(value: Any) -> Any:
  """Mappings and sequences (also TF's tracking wrappers) -> dict / list."""
  if isinstance(value, Mapping):
    return {str(key): _plain(item) for key, item in value.items()}
  if isinstance(value, (list, tuple)):
    return [_plain(item) for item in value]
  return value


def _read_spec_json(path: str) -> Dict[str, Any]:
  """The parsed spec.json of an existing directory, or None if foreign."""
  try:
    with open(os.path.join(path, SPEC_FILE), encoding="utf-8") as f:
      data = json.load(f)
  except (OSError, ValueError):
    return None
  return data if isinstance(data, dict) else None


def usual_mode(directory: bool = False) -> int:
  """The mode a plain open()/makedirs() would give: 0o666 (files) or 0o777
  (directories) less the process's umask. The umask is read from Linux's
  /proc/self/status where it shows it, so other threads never see it
  changed (os.umask's set-and-restore is the fallback). The one home of
  this rule: envmodels imports nothing of the framework, and
  i2a.io_utils uses it."""
  mask = None
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("Umask:"):
          mask = int(line.split()[1], 8)
          break
  except (OSError, ValueError, IndexError):
    pass
  if mask is None:
    mask = os.umask(0)
    os.umask(mask)
  return (0o777 if directory else 0o666) & ~mask


def _write_file(path: str, text: str) -> None:
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())


def is_export(path: str) -> bool:
  """Whether `path` is a directory holding an envmodel export's spec.json."""
  data = _read_spec_json(path) if os.path.isdir(path) else None
  return data is not None and data.get("format") == FORMAT_NAME


def export(model: base.EnvModel, export_dir: str,
           provenance: Optional[Mapping[str, Any]] = None) -> str:
  """Writes `model` (spec, hyperparameters, variables) to `export_dir`.

  `provenance` (JSON-able) goes into spec.json as is: what the model was
  trained on (i2a.pretrain: the dataset's fingerprint and protocol).
  Atomic: written into a temporary sibling directory, then renamed; an
  existing export at `export_dir` is replaced, anything else there is
  refused. Returns the absolute export directory.
  """
  if not isinstance(model, base.EnvModel):
    raise ExportError(f"export needs an envmodels.EnvModel, given "
                      f"{type(model).__name__}.")
  if getattr(model, "imagination_prior", None) is not None:
    raise ExportError(
        "this model has an attached imagination prior; export the pretrained "
        "model before attaching one (the imagination prior belongs to the "
        "agent and is saved with the agent's checkpoint).")
  hyperparameters = getattr(model, "hyperparameters", None)
  if not isinstance(hyperparameters, Mapping):
    raise ExportError(f"{type(model).__name__} has no `hyperparameters` "
                      "dict; every envmodel kind must store the constructor "
                      "hyperparameters it was built with.")
  export_dir = os.path.abspath(export_dir)
  if (os.path.exists(export_dir) and
      (not os.path.isdir(export_dir) or
       (os.listdir(export_dir) and not is_export(export_dir)))):
    raise ExportError(
        f"refusing to export to {export_dir!r}: it exists and is not an "
        "envmodel export. Pass a new or empty directory.")
  model.create_variables()  # in case some lazy variables were never built
  bad = _nonfinite(model)
  if bad:
    raise ExportError(f"refusing to export a model with NaN or infinite "
                      f"weights ({bad}).")
  num_parameters = int(sum(np.prod(v.shape) for v in model.variables))
  spec_json = {
      "format": FORMAT_NAME,
      "format_version": base.FORMAT_VERSION,
      "kind": model.spec.kind,
      "spec": model.spec.to_json(),
      "hyperparameters": _plain(hyperparameters),
      "variables": VARIABLES_PREFIX,
      "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
      "num_parameters": num_parameters,
      "written_with": {"tensorflow": tf.__version__,
                       "sonnet": snt.__version__,
                       # What the exporting (pretraining) process computed in.
                       "precision": precision.current()},
  }
  if provenance is not None:
    spec_json["provenance"] = _plain(provenance)
  try:
    spec_text = json.dumps(spec_json, indent=2, sort_keys=True)
  except (TypeError, ValueError) as e:
    raise ExportError(f"the model's spec or hyperparameters are not "
                      f"JSON-able ({e}): {hyperparameters!r}.") from e

  parent, name = os.path.split(export_dir)
  os.makedirs(parent, exist_ok=True)
  tmp_dir = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
  try:
    # mkdtemp's directory is private (0o700): the export gets the mode a
    # plain makedirs would give.
    os.chmod(tmp_dir, usual_mode(directory=True))
    tf.train.Checkpoint(model=model).write(
        os.path.join(tmp_dir, VARIABLES_PREFIX))
    _write_file(os.path.join(tmp_dir, SPEC_FILE), spec_text + "\n")
    if os.path.exists(export_dir):  # replace an older export
      old_dir = tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent)
      os.rename(export_dir, os.path.join(old_dir, name))
      try:
        os.rename(tmp_dir, export_dir)
      except BaseException:
        os.rename(os.path.join(old_dir, name), export_dir)
        raise
      finally:
        shutil.rmtree(old_dir, ignore_errors=True)
    else:
      os.rename(tmp_dir, export_dir)
  except BaseException:
    shutil.rmtree(tmp_dir, ignore_errors=True)
    raise
  return export_dir


def _load_spec_json(export_dir: str) -> Dict[str, Any]:
  """Reads and checks spec.json; raises ExportError saying what is wrong."""
  if not os.path.isdir(export_dir):
    raise ExportError(
        f"envmodel export {export_dir!r} does not exist (no such directory). "
        "Pass the directory written by envmodels.export (i2a.pretrain writes "
        "WORKDIR/export).")
  path = os.path.join(export_dir, SPEC_FILE)
  if not os.path.exists(path):
    contents = sorted(os.listdir(export_dir))
    if os.path.isdir(os.path.join(export_dir, "variables")):
      raise ExportError(
          f"envmodel export {export_dir!r} is missing {SPEC_FILE} (found "
          f"{contents}); the export is damaged: export the model again.")
    raise ExportError(
        f"{export_dir!r} is not an envmodel export: it has no {SPEC_FILE} "
        f"(found {contents or 'an empty directory'}). Pass the directory "
        "written by envmodels.export.")
  try:
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
  except (OSError, ValueError) as e:
    raise ExportError(f"{path!r} is corrupt (not readable JSON: {e}); "
                      "export the model again.") from e
  if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
    raise ExportError(
        f"{export_dir!r} is not an envmodel export: its {SPEC_FILE} lacks "
        f"\"format\": \"{FORMAT_NAME}\" (it was written by something else). "
        "Pass the directory written by envmodels.export.")
  version = data.get("format_version")
  if not isinstance(version, int) or isinstance(version, bool) or version < 1:
    raise ExportError(f"{path!r} is corrupt: format_version must be a "
                      f"positive integer, found {version!r}.")
  if version not in READABLE_VERSIONS:
    raise ExportError(
        f"envmodel export {export_dir!r} has format version {version}, newer "
        f"than this envmodels reads (versions "
        f"{', '.join(map(str, READABLE_VERSIONS))}). Upgrade the package "
        f"that provides envmodels to a release that reads format version "
        f"{version} (pip install -U ...), then load it again.")
  for key, kind in (("spec", dict), ("hyperparameters", dict)):
    if not isinstance(data.get(key), kind):
      raise ExportError(f"{path!r} is corrupt: field {key!r} must be a JSON "
                        f"object, found {data.get(key)!r}.")
  spec_version = data["spec"].get("version", version)
  if (not isinstance(spec_version, int) or isinstance(spec_version, bool)
      or spec_version not in READABLE_VERSIONS):
    raise ExportError(f"{path!r} is corrupt: spec.version must be one of "
                      f"the format versions {list(READABLE_VERSIONS)}, found "
                      f"{spec_version!r}.")
  return data


def read_spec(export_dir: str) -> Dict[str, Any]:
  """The checked spec.json of an export (ExportError saying what is wrong);
  reads no variables."""
  return _load_spec_json(os.fspath(export_dir))


def provenance(export_dir: str) -> Dict[str, Any]:
  """What the export records it was trained on; {} for exports written
  without it (before provenance existed): unknown."""
  recorded = read_spec(export_dir).get("provenance")
  return dict(recorded) if isinstance(recorded, dict) else {}


def fingerprint(export_dir: str) -> str:
  """The identity of an export: sha256 of its spec.json (parsed, as
  canonical JSON: whitespace does not count) and of each file under
  variables/ (names and bytes). Equal fingerprints: the same model, weight
  for weight. Works for exports of every format version."""
  export_dir = os.fspath(export_dir)
  data = read_spec(export_dir)
  digest = hashlib.sha256()
  digest.update(json.dumps(data, sort_keys=True,
                           separators=(",", ":")).encode("utf-8"))
  variables_dir = os.path.dirname(
      os.path.join(export_dir, data.get("variables", VARIABLES_PREFIX)))
  names = (sorted(os.listdir(variables_dir))
           if os.path.isdir(variables_dir) else [])
  for name in names:
    digest.update(b"\0" + name.encode("utf-8") + b"\0")
    with open(os.path.join(variables_dir, name), "rb") as f:
      for block in iter(lambda: f.read(1 << 22), b""):
        digest.update(block)
  return digest.hexdigest()


def _variable_mismatch(prefix: str, model: base.EnvModel) -> str:
  """A short account of how the checkpoint at `prefix` differs from
  `model`'s variables: counts, a few names, and the top-level scopes (the
  kinds' module names) on each side."""
  try:
    reader = tf.train.load_checkpoint(prefix)
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    stored = {attribute.full_name for node in graph.nodes
              for attribute in node.attributes
              if attribute.name == "VARIABLE_VALUE"}
  except Exception:  # pylint: disable=broad-except
    return "the checkpoint's variable names cannot be read"
  expected = {v.name.split(":")[0] for v in model.variables}
  missing, unexpected = sorted(expected - stored), sorted(stored - expected)
  scopes = lambda names: sorted({n.split("/")[0] for n in names})  # pylint: disable=unnecessary-lambda-assignment
  parts = [f"the model built from spec.json has scope(s) "
           f"{scopes(expected)}, the variables were written by scope(s) "
           f"{scopes(stored)}"]
  if missing:
    parts.append(f"{len(missing)} of its {len(expected)} variables are not "
                 f"in the checkpoint (e.g. {missing[:2]})")
  if unexpected:
    parts.append(f"{len(unexpected)} of the checkpoint's {len(stored)} are "
                 f"not in the model (e.g. {unexpected[:2]})")
  if not missing and not unexpected:
    parts.append("the names agree, the shapes or dtypes do not")
  return "; ".join(parts)


def load(export_dir: str, seed: int = 0) -> base.EnvModel:
  """Loads a frozen model: no trainable variables, seeded with `seed`.

  Raises ExportError (a ValueError) for a missing, corrupt, foreign or
  newer-version export.
  """
  export_dir = os.fspath(export_dir)
  data = _load_spec_json(export_dir)
  spec_path = os.path.join(export_dir, SPEC_FILE)
  try:
    spec = base.EnvModelSpec.from_json(data["spec"])
  except (TypeError, ValueError, KeyError) as e:
    raise ExportError(f"{spec_path!r} is corrupt: bad 'spec' field "
                      f"{data['spec']!r} ({e}).") from e
  if spec.kind not in registry.kinds():
    raise ExportError(
        f"envmodel export {export_dir!r} has kind {spec.kind!r}, which this "
        f"envmodels does not know (known kinds: {', '.join(registry.kinds())})."
        " Upgrade the package, or import the module that registers it.")
  prefix = os.path.join(export_dir, data.get("variables", VARIABLES_PREFIX))
  if not tf.io.gfile.exists(prefix + ".index"):
    raise ExportError(
        f"envmodel export {export_dir!r} is missing its variables (no "
        f"{prefix}.index); the export is damaged: export the model again.")

  cls = registry.model_class(spec.kind)
  with tf.variable_creator_scope(_frozen_creator):
    try:
      model = cls(spec, seed=seed, **data["hyperparameters"])
    except (TypeError, ValueError) as e:
      raise ExportError(
          f"cannot rebuild the {spec.kind!r} model of {export_dir!r} from its "
          f"hyperparameters {data['hyperparameters']!r}: {e}") from e
    model.create_variables()
  status = None
  try:
    status = tf.train.Checkpoint(model=model).read(prefix)
    status.assert_consumed()
  except Exception as e:  # pylint: disable=broad-except
    if status is not None:
      status.expect_partial()  # no warning per unrestored variable
    if isinstance(e, AssertionError):  # read, but not this model's
      raise ExportError(
          f"the variables of envmodel export {export_dir!r} do not match "
          f"its spec.json (kind {spec.kind!r}, expected by spec.json; "
          f"{_variable_mismatch(prefix, model)}). spec.json and variables/ "
          "come from different models: export the model again.") from None
    raise ExportError(
        f"the variables of envmodel export {export_dir!r} are corrupt or do "
        f"not match its spec.json ({type(e).__name__}: {str(e)[:300]}); "
        "export the model again.") from e
  snt.allow_empty_variables(model)
  if model.trainable_variables:
    raise ExportError(f"internal error: the model loaded from {export_dir!r} "
                      "has trainable variables.")
  bad = _nonfinite(model)
  if bad:
    raise ExportError(
        f"envmodel export {export_dir!r} holds NaN or infinite weights ({bad}"
        "); its pretraining diverged: pretrain again with a lower "
        "--config.learning_rate.")
  model.reseed(seed)
  return model
