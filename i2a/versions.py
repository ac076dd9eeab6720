"""The whole pinned stack of the framework, checked by `import i2a`.

envmodels checks only what it imports (envmodels/versions.py: TF, TFP,
Sonnet), so it stays importable alone, e.g. where Reverb is not installed.
The framework adds Reverb (0.14 is compiled against TF 2.15, so the four
move together: BUILD.md) and gymnasium (major version 1, setup.py). Run
manifests (i2a/replay/files.py) and the demo report record these versions.
"""

from __future__ import annotations

from typing import Dict, Optional

from envmodels import versions as envmodels_versions

PINNED: Dict[str, str] = dict(envmodels_versions.PINNED, **{
    "dm-reverb": "0.14.0"})
# Packages pinned to a major version: name -> the major version needed.
MAJOR: Dict[str, int] = {"gymnasium": 1}
# Also recorded in manifests, unpinned.
RECORDED = ("ale-py", "numpy")


def recorded_versions() -> Dict[str, Optional[str]]:
  """{package: installed version or None} for every package of the stack
  (what run manifests and the demo report record)."""
  names = list(PINNED) + list(MAJOR) + list(RECORDED)
  return {name: envmodels_versions.installed_version(name) for name in names}


def check_versions() -> None:
  """Raises ImportError naming found and needed versions on a mismatch."""
  envmodels_versions.check(
      PINNED, "The I2A framework",
      "Reverb 0.14 is compiled against TF 2.15")
  for name, major in MAJOR.items():
    found = envmodels_versions.installed_version(name)
    if found is None or found.split(".")[0] != str(major):
      envmodels_versions.check(
          {name: f"{major}.x"}, "The I2A framework",
          f"{name} {major}.x, setup.py")
