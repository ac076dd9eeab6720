"""The pinned stack, checked on import before TensorFlow loads.

Reverb 0.14 is compiled against TF 2.15, so TF, TFP, Sonnet and Reverb move
together (BUILD.md). A mismatch fails early with the versions found, the
versions needed and the command that fixes it, rather than with an obscure
symbol error from Reverb's C++ extension.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Dict, Optional, Sequence

PINNED: Dict[str, str] = {
    "tensorflow": "2.15.1",
    "tensorflow-probability": "0.23.0",
    "dm-sonnet": "2.0.2",
    "dm-reverb": "0.14.0",
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


def mismatches(packages: Sequence[str] = tuple(PINNED)) -> Dict[str, Optional[str]]:
  """{package: installed version or None} for every pin that is not met."""
  found = {name: installed_version(name) for name in packages}
  return {name: ver for name, ver in found.items() if ver != PINNED[name]}


def check_versions() -> None:
  """Raises ImportError naming found and needed versions on a mismatch."""
  if os.environ.get(SKIP_ENV):
    return
  bad = mismatches()
  if bad:
    lines = [f"  {name}: found {found or 'not installed'}, "
             f"needs {PINNED[name]}" for name, found in bad.items()]
    raise ImportError(
        "The I2A framework needs its pinned TensorFlow stack (Reverb 0.14 is "
        "compiled against TF 2.15):\n" + "\n".join(lines) +
        f"\nFix: {FIX}\nSee BUILD.md. To bypass at your own risk, set "
        f"{SKIP_ENV}=1.")
