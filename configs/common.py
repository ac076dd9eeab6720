"""Pieces shared by the config files: protocols as ConfigDicts, presets.

Every binary's config holds a `protocol` ConfigDict (the fields of
i2a.environments.Protocol), overridable on the command line, e.g.
`--config.protocol.env_id=ALE/Bowling-v5 --config.protocol.action_set=minimal`.
"""

from __future__ import annotations

from typing import Any, Dict, Sequence

import ml_collections


def protocol_config(preset: str) -> ml_collections.ConfigDict:
  """The named protocol preset (i2a.environments.PRESETS) as a ConfigDict."""
  from i2a.environments.protocol import PRESETS  # pylint: disable=import-outside-toplevel
  if preset not in PRESETS:
    raise ValueError(f"unknown protocol preset {preset!r}; known: "
                     f"{sorted(PRESETS)}.")
  fields = PRESETS[preset].to_json()
  if fields["crop"] is None:
    # A placeholder keeps the field overridable with a 4-tuple.
    fields["crop"] = ml_collections.FieldReference(None, field_type=tuple)
  return ml_collections.ConfigDict(fields)


def check_preset(preset: str, known: Sequence[str], config_file: str) -> str:
  preset = preset or known[0]
  if preset not in known:
    raise ValueError(f"{config_file}: unknown preset {preset!r}; known: "
                     f"{', '.join(known)} (use --config={config_file}:PRESET).")
  return preset


def to_dict(config: ml_collections.ConfigDict) -> Dict[str, Any]:
  return config.to_dict()
