"""The scripts in examples/ run and produce what they say (short budgets)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.run([sys.executable, *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300,
                        check=False)


def test_rollout_export_writes_the_pictures_and_the_errors(tmp_path):
  result = _run("examples/rollout_export.py", "--steps=3",
                f"--output={tmp_path}")
  assert result.returncode == 0, result.stderr
  assert os.path.getsize(tmp_path / "rollout.png") > 0
  assert (tmp_path / "rollout.gif").read_bytes()[:6] == b"GIF89a"
  lines = result.stdout.splitlines()
  rows = [line.split() for line in lines if line.strip()[:1].isdigit()]
  assert [int(r[0]) for r in rows] == [1, 2, 3]
  for row in rows:  # action name, model MSE, copy MSE, predicted reward
    assert row[1] in ("NOOP", "RIGHT", "UP", "LEFT", "DOWN")
    assert 0.0 <= float(row[2]) < 1.0 and 0.0 <= float(row[3]) < 1.0


def test_custom_agent_plays_against_the_random_policy():
  result = _run("examples/custom_agent.py", "--episodes=1",
                "--max_steps=20", "--horizon=2")
  assert result.returncode == 0, result.stderr
  assert "model-predictive agent: mean return" in result.stdout
  assert "uniform random policy:  mean return" in result.stdout
