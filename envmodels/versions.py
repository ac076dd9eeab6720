"""The pinned stack envmodels imports, checked on import before TensorFlow
loads.

envmodels is importable alone (docs/envmodels.md): it imports TensorFlow,
TensorFlow Probability and Sonnet, and checks exactly those. The framework
(`import i2a`, i2a/versions.py) checks the whole stack on top: Reverb 0.14
is compiled against TF 2.15, so TF, TFP, Sonnet and Reverb move together
(BUILD.md), and gymnasium's major version. A mismatch fails early with the
versions found, the versions needed and the command that fixes it, rather
than with an obscure symbol error.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Dict, Mapping, Optional

# What envmodels imports (and nothing else: no Reverb, no gymnasium).
PINNED: Dict[str, str] = {
    "tensorflow": "2.15.1",
    "tensorflow-probability": "0.23.0",
    "dm-sonnet": "2.0.2",
}
# Distributions that provide the same module as a pinned one.
_ALIASES = {"tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu")}
FIX = "make venv   (or: pip install -c constraints.txt -e '.[test]')"
# Set I2A_SKIP_VERSION_CHECK=1 to run against other versions at your own risk.
SKIP_ENV = "I2A_SKIP_VERSION_CHECK"


def installed_version(package: str) -> Optional[str]:
  for name in _ALIASES.get(package, (package,)):
    try:
      return metadata.version(name)
    except metadata.PackageNotFoundError:
      continue
  return None


def mismatches(pins: Mapping[str, str] = PINNED
               ) -> Dict[str, Optional[str]]:
  """{package: installed version or None} for every pin that is not met."""
  found = {name: installed_version(name) for name in pins}
  return {name: ver for name, ver in found.items() if ver != pins[name]}


def check(pins: Mapping[str, str], who: str, why: str) -> None:
  """Raises ImportError naming found and needed versions of `pins` on a
  mismatch (`who` needs them, `why` says so); the one check behind
  envmodels' and i2a's."""
  if os.environ.get(SKIP_ENV):
    return
  bad = mismatches(pins)
  if bad:
    lines = [f"  {name}: found {found or 'not installed'}, "
             f"needs {pins[name]}" for name, found in bad.items()]
    raise ImportError(
        f"{who} needs its pinned TensorFlow stack ({why}):\n" +
        "\n".join(lines) + f"\nFix: {FIX}\nSee BUILD.md. To bypass at your "
        f"own risk, set {SKIP_ENV}=1.")


def check_versions() -> None:
  """envmodels' check: TF, TFP and Sonnet only."""
  check(PINNED, "envmodels", "TF, TFP and Sonnet move together")
