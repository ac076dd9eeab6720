"""python -m i2a.sweep --combine: one table from the reports of sweep
directories of one grid, seed by seed."""

import json
import os
import subprocess
import sys

import pytest

from i2a import io_utils
from i2a.run import sweep_combine as combining
from i2a.run import statistics
from i2a.run import sweep_report as reporting

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _agent(name, seeds, hours=0.5, late=True):
  """`late`: the seeds have a late evaluation return (value - 2; reports
  written before that column have none)."""
  entries = []
  for seed, value in seeds.items():
    if value is None:
      entries.append(dict(seed=seed, state="stopped"))
    else:
      entries.append(dict(seed=seed, state="done", evaluation_return=value,
                          evaluation_episodes=100,
                          final_training_return=value - 1.0,
                          env_steps=1000.0))
      if late:
        entries[-1]["late_evaluation_return"] = value - 2.0
  return dict(name=name, config_file="configs/agents/i2a.py:minipacman",
              envmodel="pretrain/dssm_det", runs=len(entries),
              done=sum(v is not None for v in seeds.values()),
              hours_per_run=hours, seeds=entries)


def _model(name, seeds):
  return dict(name=name, config_file="configs/envmodels/sssm.py:minipacman",
              kind="sssm", jump=1, action_free=False, train_steps=5000,
              batch_size=16, runs=len(seeds), done=len(seeds),
              hours_per_run=0.1,
              seeds=[dict(seed=s, state="done", step=5000,
                          held_out_nats_per_frame=v)
                     for s, v in seeds.items()])


def _report(tmp_path, name, agents, models, grid="g"):
  path = tmp_path / name / "report.json"
  os.makedirs(path.parent)
  path.write_text(json.dumps(dict(
      name=grid, runs_planned=10, invocations=2, invocation_seconds=3600.0,
      compute_seconds=dict(train=3000.0), failures=[], agents=agents,
      models=models)))
  return str(path)


def test_seeds_from_two_reports_make_one_interval(tmp_path):
  first = _report(tmp_path, "first",
                  [_agent("a2c", {0: 90.0, 1: 80.0}),
                   _agent("ltq", {0: 93.0, 1: None}, hours=0.4, late=False)],
                  [_model("sssm", {0: -13.0})])
  second = _report(tmp_path, "second",
                   [_agent("ltq", {1: 70.0, 2: 85.0}, hours=0.6)],
                   [_model("sssm", {1: -14.0, 2: -15.0})])
  results = combining.combine([first, second])
  agents = {a["name"]: a for a in results["agents"]}
  assert [a["name"] for a in results["agents"]] == ["a2c", "ltq"]
  ltq = agents["ltq"]
  expected = statistics.t_interval([93.0, 70.0, 85.0])
  assert ltq["evaluation_return"]["n"] == 3
  assert ltq["evaluation_return"]["mean"] == pytest.approx(expected.mean)
  assert ltq["evaluation_return"]["half_width"] == pytest.approx(
      expected.half_width)
  assert ltq["final_training_return"]["mean"] == pytest.approx(
      expected.mean - 1.0)
  # Compared with the first configuration over the merged seeds.
  (compared,) = [c for c in results["comparisons"]
                 if (c["name"], c["value"]) == ("ltq", "evaluation_return")]
  assert compared["reference"] == "a2c"
  assert compared["half_width"] == pytest.approx(statistics.welch_interval(
      [93.0, 70.0, 85.0], [90.0, 80.0]).half_width)
  # Only the seeds whose report has it count for the late evaluation.
  late = statistics.t_interval([68.0, 83.0])
  assert ltq["late_evaluation_return"]["n"] == 2
  assert ltq["late_evaluation_return"]["mean"] == pytest.approx(late.mean)
  assert ltq["late_evaluation_return"]["half_width"] == pytest.approx(
      late.half_width)
  # The stopped seed 1 of the first report gave way to the second's result.
  assert [(e["seed"], e["report"]) for e in ltq["seeds"]] == [
      (0, first), (1, second), (2, second)]
  assert (ltq["runs"], ltq["done"]) == (3, 3)
  # Hours per run: weighted by the runs done in each report (1 and 2).
  assert ltq["hours_per_run"] == pytest.approx((0.4 * 1 + 0.6 * 2) / 3)
  assert agents["a2c"]["evaluation_return"]["n"] == 2
  sssm = results["models"][0]
  assert sssm["held_out_nats_per_frame"]["mean"] == pytest.approx(-14.0)
  assert sssm["held_out_nats_per_frame"]["n"] == 3
  assert results["sources"] == [first, second]
  assert results["compute_seconds"] == dict(train=6000.0)
  assert results["invocations"] == 4
  text = reporting.markdown(results)
  assert f"combined from the reports {first}, {second}" in text
  assert "| ltq | pretrain/dssm_det | 3/3 |" in text
  assert "(n=3)" in text


def test_one_seed_in_two_reports_is_refused(tmp_path):
  first = _report(tmp_path, "first", [_agent("a2c", {0: 90.0})], [])
  second = _report(tmp_path, "second", [_agent("a2c", {0: 70.0})], [])
  with pytest.raises(ValueError, match="agent 'a2c' seed 0 has a result in "
                     ".*first/report.json and in .*second/report.json: two "
                     "runs of one seed"):
    combining.combine([first, second])


def test_a_duplicate_seed_is_taken_from_the_first_or_last_report(tmp_path):
  first = _report(tmp_path, "first", [], [_model("sssm", {0: -13.0,
                                                          1: -14.0})])
  second = _report(tmp_path, "second", [], [_model("sssm", {1: -16.0,
                                                            2: -15.0})])
  kept_first = combining.combine([first, second], duplicates="first")
  assert kept_first["models"][0]["held_out_nats_per_frame"]["mean"] == \
      pytest.approx(-14.0)
  [dropped] = kept_first["duplicates"]
  assert (dropped["name"], dropped["seed"], dropped["report"],
          dropped["kept_from"]) == ("sssm", 1, second, first)
  assert dropped["held_out_nats_per_frame"] == -16.0
  kept_last = combining.combine([first, second], duplicates="last")
  assert kept_last["models"][0]["held_out_nats_per_frame"]["mean"] == \
      pytest.approx((-13.0 - 16.0 - 15.0) / 3)
  assert kept_last["duplicates"][0]["held_out_nats_per_frame"] == -14.0
  assert kept_last["models"][0]["seeds"][1]["report"] == second
  paths = combining.write([first, second], str(tmp_path / "out"),
                          duplicates="first")
  text = open(paths["markdown"]).read()
  assert "## Seeds with results in two reports" in text
  assert f"| model sssm | 1 | held_out_nats_per_frame -16.00 | {second} | " \
      f"{first} |" in text
  with pytest.raises(ValueError, match="--duplicates must be one of refuse, "
                     "first, last, given 'both'"):
    combining.combine([first, second], duplicates="both")


def test_reports_of_different_grids_or_missing_files_are_refused(tmp_path):
  first = _report(tmp_path, "first", [_agent("a2c", {0: 90.0})], [])
  other = _report(tmp_path, "other", [_agent("a2c", {1: 70.0})], [],
                  grid="h")
  with pytest.raises(ValueError, match=r"the reports are of different grids "
                     r"\(g, h\)"):
    combining.combine([first, other])
  with pytest.raises(ValueError, match="needs two or more report.json"):
    combining.combine([first])
  with pytest.raises(ValueError, match="nowhere.json does not exist"):
    combining.combine([first, str(tmp_path / "nowhere.json")])


def test_the_command_writes_the_combined_report(tmp_path):
  first = _report(tmp_path, "first", [_agent("a2c", {0: 90.0})], [])
  second = _report(tmp_path, "second", [_agent("a2c", {1: 70.0})], [])
  out = tmp_path / "combined"
  done = subprocess.run(
      [sys.executable, "-m", "i2a.sweep", f"--combine={first},{second}",
       f"--workdir={out}"], cwd=REPO, capture_output=True, text=True,
      timeout=120, check=False)
  assert done.returncode == 0, done.stderr
  report = io_utils.read_json(str(out / "report.json"))
  assert report["agents"][0]["evaluation_return"]["n"] == 2
  assert (out / "report.md").read_text().startswith("# Sweep g")
  refused = subprocess.run(
      [sys.executable, "-m", "i2a.sweep", f"--combine={first},{second}",
       "--grid=configs/sweeps/i2a_minipacman.py:tiny", f"--workdir={out}"],
      cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
  assert refused.returncode == 2
  assert "--combine writes one table from finished reports and runs " \
      "nothing" in refused.stderr


def test_compare_prints_a_difference_from_a_combined_report(tmp_path):
  """`--compare=A,B` on a directory with a combined report.json (no runs):
  A's returns minus B's over the merged seeds; unknown names refused."""
  first = _report(tmp_path, "first",
                  [_agent("a2c", {0: 90.0, 1: 80.0}),
                   _agent("oracle", {0: 150.0, 1: 170.0})], [])
  second = _report(tmp_path, "second",
                   [_agent("a2c", {2: 85.0}), _agent("oracle", {2: 160.0})],
                   [])
  out = str(tmp_path / "combined")
  combining.write([first, second], out)
  expected = statistics.welch_interval([150.0, 170.0, 160.0],
                                      [90.0, 80.0, 85.0])
  text = reporting.compare(out, ["oracle", "a2c"])
  assert text.startswith("Against a2c: each configuration's mean minus")
  assert f"| oracle | evaluation return | {expected.format()} | yes |" in text
  done = subprocess.run(
      [sys.executable, "-m", "i2a.sweep", "--compare=oracle,a2c",
       f"--workdir={out}"], cwd=REPO, capture_output=True, text=True,
      timeout=120, check=False)
  assert done.returncode == 0, done.stderr
  assert expected.format() in done.stdout
  with pytest.raises(ValueError, match="has no agent configuration 'ltq'; "
                     "it has a2c, oracle"):
    reporting.compare(out, ["ltq", "a2c"])
  with pytest.raises(ValueError, match="takes two configurations"):
    reporting.compare(out, ["oracle"])
  refused = subprocess.run(
      [sys.executable, "-m", "i2a.sweep", "--compare=oracle,a2c", "--report",
       f"--workdir={out}"], cwd=REPO, capture_output=True, text=True,
      timeout=120, check=False)
  assert refused.returncode == 2
  assert "--compare=A,B prints a comparison and runs nothing" in \
      refused.stderr


def test_compare_across_directories_names_a_configuration_name_at_dir(
    tmp_path):
  """`--compare=a2c,a2c@OTHER`: the same configuration in two report
  directories (another learning rate, say), A minus B, rows named as
  given; a configuration against itself and a missing directory refused."""
  low = _report(tmp_path, "low", [_agent("a2c", {0: 100.0, 1: 110.0,
                                                  2: 120.0})], [])
  high = _report(tmp_path, "high", [_agent("a2c", {0: 80.0, 1: 70.0}),
                                    _agent("i2a", {0: 60.0, 1: 65.0})], [])
  low_dir, high_dir = os.path.dirname(low), os.path.dirname(high)
  text = reporting.compare(low_dir, ["a2c", f"a2c@{high_dir}"])
  expected = statistics.welch_interval([100.0, 110.0, 120.0], [80.0, 70.0])
  assert text.startswith(f"Against a2c@{high_dir}: each configuration's")
  assert f"| a2c | evaluation return | {expected.format()} | yes |" in text
  # Both sides may name other directories.
  text = reporting.compare(str(tmp_path), [f"i2a@{high_dir}",
                                           f"a2c@{low_dir}"])
  expected = statistics.welch_interval([60.0, 65.0], [100.0, 110.0, 120.0])
  assert (f"| i2a@{high_dir} | evaluation return | {expected.format()} |"
          in text)
  with pytest.raises(ValueError, match="a2c against itself; name two "
                     "configurations, or one of another directory"):
    reporting.compare(low_dir, ["a2c", "a2c"])
  missing = str(tmp_path / "missing")
  with pytest.raises(ValueError, match=f"{missing} is no sweep or report "
                     "directory"):
    reporting.compare(low_dir, ["a2c", f"a2c@{missing}"])
  with pytest.raises(ValueError, match=f"{low_dir} has no agent "
                     "configuration 'i2a'; it has a2c"):
    reporting.compare(high_dir, ["i2a", f"i2a@{low_dir}"])
