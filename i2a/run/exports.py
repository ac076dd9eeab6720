"""The runtimes' check of an envmodel export before a run writes anything.

Data flow: every agent runtime that takes config.envmodel (i2a/run/train.py,
distributed.py, evaluate.py, plan.py) calls `check_export` first: the
export's protocol (its provenance, written by i2a.pretrain) must agree with
the agent's on every field that changes the transitions
(Protocol.MODEL_FIELDS) unless config.allow_protocol_mismatch says the
transfer is deliberate, and the export's fingerprint is returned for the
workdir's identity.json (i2a/runs.py `Identity`, under ENVMODEL_IDENTITY).
The agents' own check of a loaded model against the environment (frame
shape, action count) is agents.builder.check_envmodel_fits.
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

import ml_collections
from absl import logging

import envmodels
from i2a import environments, runs

# The name of the envmodel export in a workdir's identity.json.
ENVMODEL_IDENTITY = "envmodel"


def export_protocol(export_dir: str
                    ) -> Tuple[Optional[environments.Protocol], str]:
  """(the protocol the export was trained under, where it was read):
  the export's provenance; for exports written before provenance existed,
  protocol.json of the pretrain workdir the export sits in; (None, '')
  when neither records it (unknown). ExportError for an unusable export."""
  recorded = envmodels.provenance(export_dir).get("protocol")
  try:
    if isinstance(recorded, dict):
      return (environments.Protocol.from_json(recorded),
              f"the provenance in {os.path.join(export_dir, 'spec.json')}")
    path = os.path.join(os.path.dirname(os.path.abspath(export_dir)),
                        runs.PROTOCOL)
    if os.path.exists(path):
      return environments.Protocol.load(path), path
  except (TypeError, ValueError) as e:
    raise envmodels.ExportError(
        f"the protocol recorded for the envmodel export {export_dir!r} is "
        f"not a valid protocol ({e}); export the model again.") from e
  return None, ""


def check_export(config: ml_collections.ConfigDict,
                 protocol: environments.Protocol,
                 export_dir: str = "") -> runs.Identity:
  """The identity of the export `export_dir` (default config.envmodel),
  refused (ValueError naming the fields) if it was trained under a protocol
  that differs from `protocol` on Protocol.MODEL_FIELDS, unless
  config.allow_protocol_mismatch is True (a deliberate transfer: logged).
  An export whose protocol is unknown (written before provenance, outside
  a pretrain workdir) is accepted with a warning; its spec is still
  checked against the environment by `agents.builder.check_envmodel_fits`."""
  export_dir = export_dir or config.envmodel
  exported, source = export_protocol(export_dir)
  if exported is None:
    logging.warning("the envmodel export %s records no protocol (written "
                    "before provenance existed, outside a pretrain "
                    "workdir): only its observation shape and action count "
                    "are checked against %s.", export_dir, protocol.env_id)
  else:
    diff = exported.model_differences(protocol)
    allowed = bool(config.get("allow_protocol_mismatch", False))
    lines = "\n".join(f"  protocol.{name}: {theirs!r} (export) vs "
                      f"{ours!r} (config)"
                      for name, (theirs, ours) in diff.items())
    if diff and not allowed:
      flags = " ".join(f"--config.protocol.{name}={theirs!r}"
                       for name, (theirs, _) in diff.items())
      raise ValueError(
          f"the envmodel export {export_dir!r} was trained under another "
          f"protocol than this run's (export's protocol read from {source})"
          f":\n{lines}\nRun under the export's protocol ({flags}), "
          "pretrain a model on data collected under this protocol, or pass "
          "--config.allow_protocol_mismatch=True to transfer the model "
          "deliberately.")
    if diff:
      logging.warning("allow_protocol_mismatch: using the export %s, "
                      "trained under another protocol:\n%s", export_dir,
                      lines)
  return runs.Identity(what="envmodel export",
                       fingerprint=envmodels.fingerprint(export_dir),
                       path=os.path.abspath(export_dir),
                       flag="--config.envmodel")
