"""envmodels checks only the stack it imports (envmodels/versions.py: TF, TFP,
Sonnet), so it loads where Reverb cannot be imported; the framework's
whole-stack check (Reverb, gymnasium) lives in i2a/versions.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import envmodels
from envmodels import versions

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# Blocks `import reverb` (None in sys.modules makes it raise ImportError),
# then imports envmodels and rolls out a loaded tiny export.
_BLOCKED_SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["reverb"] = None
    try:
      import reverb  # noqa: F401
    except ImportError:
      pass
    else:
      raise SystemExit("reverb was importable")
    import numpy as np
    import envmodels
    model = envmodels.load(sys.argv[1], seed=0)
    rollout = model.rollout(
        model.initial_state(np.zeros((1, 2, 16, 16, 3), np.uint8)),
        np.zeros((1, 2, 1), np.int32))
    assert "reverb" not in {name.split(".")[0] for name, module in
                            sys.modules.items() if module is not None}
    print("rewards", rollout.rewards.shape.as_list())
""")


def test_envmodels_pins_only_what_it_imports():
  assert sorted(versions.PINNED) == ["dm-sonnet", "tensorflow",
                                     "tensorflow-probability"]


def test_envmodels_loads_an_export_where_reverb_cannot_be_imported(tmp_path):
  spec = envmodels.EnvModelSpec(kind="dssm_det", observation_shape=(16, 16, 3),
                                num_actions=3, jump=1, context_length=2)
  model = envmodels.build(
      spec, **envmodels.model_class("dssm_det").tiny_hyperparameters())
  model.create_variables()
  export = envmodels.export(model, str(tmp_path / "export"))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
      [REPO_ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
  env.pop(versions.SKIP_ENV, None)
  process = subprocess.run([sys.executable, "-c", _BLOCKED_SCRIPT, export],
                           env=env, capture_output=True, text=True,
                           timeout=600, check=False)
  assert process.returncode == 0, process.stderr[-3000:]
  assert "rewards [1, 2]" in process.stdout


def test_the_framework_check_names_found_and_needed_versions(monkeypatch):
  from i2a import versions as stack  # pylint: disable=g-import-not-at-top
  assert stack.PINNED["dm-reverb"] == "0.14.0"
  assert set(versions.PINNED) < set(stack.PINNED)
  monkeypatch.delenv(versions.SKIP_ENV, raising=False)
  found = {"dm-reverb": "0.13.0"}
  monkeypatch.setattr(
      versions, "installed_version",
      lambda name: found.get(name, stack.PINNED.get(name, "1.4.0")))
  with pytest.raises(ImportError) as error:
    stack.check_versions()
  message = str(error.value)
  assert "dm-reverb: found 0.13.0, needs 0.14.0" in message
  assert "make venv" in message
  versions.check_versions()  # envmodels does not care about Reverb
  found.update({"dm-reverb": "0.14.0", "gymnasium": "0.29.1"})
  with pytest.raises(ImportError, match="gymnasium: found 0.29.1, needs 1.x"):
    stack.check_versions()
  monkeypatch.setenv(versions.SKIP_ENV, "1")
  stack.check_versions()  # bypassed at the user's own risk
