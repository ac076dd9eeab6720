"""benchmarks/claim2_summary.py: rows of sweep reports, their intervals,
their differences from their references, and the errors for malformed
rows."""

import json
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import claim2_summary  # pylint: disable=wrong-import-position
from i2a.run.statistics import t_interval, welch_interval  # pylint: disable=wrong-import-position


def _report(directory, agents):
  """A report directory as the sweep writes it: report.json's agents,
  each with its seeds' evaluation returns (None: a seed still running)."""
  os.makedirs(directory)
  entries = []
  for name, returns in agents.items():
    seeds = [dict(seed=i, state="done" if r is not None else "running",
                  evaluation_return=r) for i, r in enumerate(returns)]
    entries.append(dict(name=name, seeds=seeds))
  with open(os.path.join(directory, "report.json"), "w") as f:
    json.dump(dict(agents=entries), f)
  return str(directory)


def test_rows_are_compared_with_their_references(tmp_path):
  fast = _report(tmp_path / "fast", {"a2c": [100.0, 120.0, 110.0],
                                     "oracle": [150.0, 170.0, 160.0, 165.0],
                                     "copy": [105.0, 95.0, None]})
  slow = _report(tmp_path / "slow", {"a2c": [90.0, 80.0]})
  out = str(tmp_path / "out")
  result = claim2_summary.main([
      "--output", out,
      "--row", f"A2C=a2c@{fast}",
      "--row", f"oracle=oracle@{fast}>A2C",
      "--row", f"copy=copy@{fast}>A2C",
      "--row", f"A2C, slow=a2c@{slow}>A2C",
      "--row", f"planner=planner@{slow}>A2C, slow",
      "--row", f"later=a2c@{tmp_path / 'not_yet'}>A2C"])
  rows = {r["label"]: r for r in result["rows"]}
  assert rows["A2C"]["values"] == [100.0, 120.0, 110.0]
  assert "difference" not in rows["A2C"]
  # The still-running seed is left out of the copy's values.
  assert rows["copy"]["values"] == [105.0, 95.0]
  oracle = rows["oracle"]["difference"]
  expected = welch_interval([150.0, 170.0, 160.0, 165.0],
                            [100.0, 120.0, 110.0])
  assert oracle["mean"] == pytest.approx(expected.mean) == pytest.approx(
      161.25 - 110.0)
  assert oracle["low"] == pytest.approx(expected.low)
  assert oracle["high"] == pytest.approx(expected.high)
  assert oracle["separated"] is True
  assert rows["copy"]["difference"]["separated"] is False
  assert rows["A2C, slow"]["interval"]["mean"] == pytest.approx(
      t_interval([90.0, 80.0]).mean)
  assert "no configuration 'planner'" in rows["planner"]["missing"]
  assert "does not exist" in rows["later"]["missing"]
  assert rows["planner"]["values"] == [] and "difference" not in \
      rows["planner"]
  table = open(os.path.join(out, "summary_evaluation_return.md")).read()
  lines = {line.split(" | ")[0]: line for line in table.splitlines()}
  assert lines["| oracle"].startswith("| oracle | 4 | 161.2 ± ")
  assert lines["| oracle"].endswith(
      f"| A2C | {expected.mean:+.1f} ± {expected.half_width:.1f} "
      f"[{expected.low:.1f}, {expected.high:.1f}] | **yes** |")
  assert lines["| copy"].startswith("| copy | 2 | 100.0 ± ")
  assert lines["| copy"].endswith("| no |")
  assert lines["| planner"].startswith("| planner | 0 | no configuration")
  png = os.path.join(out, "summary_evaluation_return.png")
  with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  with open(os.path.join(out, "summary_evaluation_return.json")) as f:
    assert json.load(f)["value"] == "evaluation_return"


def test_malformed_rows_say_what_is_expected(tmp_path):
  with pytest.raises(ValueError, match=r"expected 'LABEL=NAME@DIR' or "
                     r"'LABEL=NAME@DIR>REFERENCE LABEL'"):
    claim2_summary.parse_row("A2C=a2c")
  report = _report(tmp_path / "r", {"a2c": [1.0, 2.0]})
  with pytest.raises(ValueError, match=r"its reference 'B' is no row's "
                     r"label; the labels are A, C"):
    claim2_summary.read_rows(
        [claim2_summary.parse_row(f"A=a2c@{report}"),
         claim2_summary.parse_row(f"C=a2c@{report}>B")], "evaluation_return")
  with pytest.raises(ValueError, match="the label 'A' is given twice"):
    claim2_summary.read_rows(
        [claim2_summary.parse_row(f"A=a2c@{report}"),
         claim2_summary.parse_row(f"A=a2c@{report}")], "evaluation_return")


def test_nothing_to_draw_is_an_error(tmp_path):
  report = _report(tmp_path / "r", {"a2c": [None]})
  with pytest.raises(ValueError, match="No row has a finished seed"):
    claim2_summary.main(["--output", str(tmp_path / "out"),
                         "--row", f"A=a2c@{report}"])


def test_the_default_rows_name_committed_reports():
  rows = [claim2_summary.parse_row(r) for r in claim2_summary.ROWS]
  labels = [r.label for r in rows]
  assert len(set(labels)) == len(labels)
  assert all(r.reference in labels for r in rows if r.reference)
  # Every default row but the sweep still running reads a committed
  # report.
  committed = [r for r in rows
               if os.path.isdir(os.path.join(REPO, r.where))]
  assert len(committed) >= len(rows) - 1
