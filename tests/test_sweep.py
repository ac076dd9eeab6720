"""python -m i2a.sweep: grids, runs across invocations, stops, failures,
the report and its intervals (tiny presets, MiniPacman)."""

import io
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from i2a import io_utils
from i2a.metrics import read_column
from i2a.run import statistics
from i2a.run import sweep as sweeping
from i2a.run import sweep_report as reporting

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Every stage: a dataset, AR and dSSM-DET, their Table 1, A2C over two
# seeds, an I2A over the dSSM-DET, and a run that fails when it starts
# (batch 3 is no multiple of the tiny preset's 2 environments).
TEST_GRID = """
import ml_collections


def get_config(preset=""):
  grid = ml_collections.ConfigDict()
  grid.name = "test_sweep"
  grid.seeds = (0,)
  grid.a2c_steps = 48
  grid.i2a_steps = 36
  grid.broken_batch = 3
  grid.collect = (dict(name="random", config="configs/collect.py:tiny"),)
  grid.pretrain = tuple(
      dict(name=kind, config=f"configs/envmodels/{kind}.py:tiny",
           data="collect/random",
           overrides=dict(train_steps=4, eval_every=2, image_every=100))
      for kind in ("ar", "dssm_det"))
  grid.evaluate_models = (dict(
      name="table", models=("pretrain/ar", "pretrain/dssm_det"),
      data="collect/random", T=3, num_windows=8, batch_size=4, horizon=3,
      rollout_batch=4),)
  # An episode ends every 4 updates (12 frames, 3 steps per unroll): rows
  # logged every 2 updates at 24 and 48 env steps see one end.
  grid.train = (
      dict(name="a2c", config="configs/agents/a2c.py:tiny", seeds=(0, 1),
           overrides=dict(env_steps=grid.get_ref("a2c_steps"))),
      dict(name="i2a", config="configs/agents/i2a.py:tiny",
           envmodel="pretrain/dssm_det",
           overrides=dict(env_steps=grid.get_ref("i2a_steps"))),
      dict(name="broken", config="configs/agents/a2c.py:tiny",
           overrides=dict(batch_size=grid.get_ref("broken_batch"))))
  grid.evaluate = dict(episodes=2)
  return grid
"""

# One A2C run that would train for ever: it is stopped.
LONG_GRID = """
import ml_collections


def get_config(preset=""):
  grid = ml_collections.ConfigDict()
  grid.name = "test_stop"
  grid.env_steps = 10 ** 9
  grid.train = (dict(name="a2c", config="configs/agents/a2c.py:tiny",
                     overrides=dict(env_steps=grid.get_ref("env_steps"),
                                    checkpoint_every=5)),)
  grid.evaluate = dict(episodes=0)
  return grid
"""


# Two short A2C runs: run at once, then budgets raised past what fits.
PAIR_GRID = """
import ml_collections


def get_config(preset=""):
  grid = ml_collections.ConfigDict()
  grid.name = "test_jobs"
  grid.seeds = (0, 1)
  grid.env_steps = 24
  grid.train = (dict(name="a2c", config="configs/agents/a2c.py:tiny",
                     overrides=dict(env_steps=grid.get_ref("env_steps"))),)
  grid.evaluate = dict(episodes=0)
  return grid
"""


def _grid_file(tmp_path, text, name="grid.py"):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def _run(grid, sweep_dir, **kwargs):
  stream = io.StringIO()
  result = sweeping.run_sweep(grid, sweep_dir, stream=stream,
                              progress_every_s=1.0, **kwargs)
  return result, stream.getvalue()


def _last_step(metrics):
  """The last logged step of a metrics.csv being written (0 if none)."""
  try:
    steps = read_column(metrics, "step")
  except (OSError, TypeError, ValueError):  # a row half-written
    return 0
  return 0 if steps is None or not len(steps) else steps[-1]


def _record(sweep_dir, run):
  return io_utils.read_json(os.path.join(sweep_dir, run, sweeping.RECORD))


# -- Intervals -----------------------------------------------------------------

def test_student_t_quantiles_match_closed_forms_and_tables():
  p = 0.975
  # df = 1 (Cauchy) and df = 2 have closed forms.
  assert statistics.student_t_quantile(p, 1) == pytest.approx(
      math.tan(math.pi * (p - 0.5)), rel=1e-12)
  assert statistics.student_t_quantile(p, 2) == pytest.approx(
      (2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-12)
  for df, table in ((3, 3.182446305284263), (4, 2.7764451051977987),
                    (9, 2.2621571627409915), (30, 2.0422724563012373)):
    assert statistics.student_t_quantile(p, df) == pytest.approx(table,
                                                               rel=1e-10)
  assert statistics.student_t_quantile(0.025, 3) == pytest.approx(
      -3.182446305284263, rel=1e-10)
  assert statistics.student_t_cdf(0.0, 5) == 0.5


def test_t_interval_on_known_numbers():
  # Seeds 1, 2, 3, 4: mean 2.5, s = sqrt(5/3), t_{0.975, 3} = 3.1824463...
  interval = statistics.t_interval([1.0, 2.0, 3.0, 4.0])
  half = 3.182446305284263 * math.sqrt(5.0 / 3.0) / math.sqrt(4.0)
  assert interval.n == 4 and interval.mean == 2.5
  assert interval.std == pytest.approx(math.sqrt(5.0 / 3.0), rel=1e-12)
  assert interval.half_width == pytest.approx(half, rel=1e-10)
  assert interval.low == pytest.approx(2.5 - half, rel=1e-10)
  assert interval.high == pytest.approx(2.5 + half, rel=1e-10)
  # Two seeds 10 and 12: s = sqrt(2), half = t_{0.975, 1} * sqrt(2)/sqrt(2).
  interval = statistics.t_interval([10.0, 12.0])
  assert interval.half_width == pytest.approx(12.706204736174705, rel=1e-10)
  assert interval.low == pytest.approx(11.0 - 12.706204736174705, rel=1e-10)
  assert interval.format(".1f") == "11.0 ± 12.7 [-1.7, 23.7] (n=2)"


def test_welch_interval_on_known_numbers():
  # Equal sizes and variances: df = 2n - 2 = 4, half-width
  # t_{0.975, 4} * sqrt(1/3 + 1/3) = 2.776445 * 0.816497.
  difference = statistics.welch_interval([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
  assert difference.mean == pytest.approx(-3.0)
  assert difference.df == pytest.approx(4.0)
  assert difference.half_width == pytest.approx(2.776445 * 0.816497, rel=1e-5)
  assert difference.separated
  assert difference.format() == "-3.00 ± 2.27 [-5.27, -0.73] (n=3, 3; df=4.0)"
  # Unequal variances: Welch-Satterthwaite df between min(n) - 1 and
  # n_a + n_b - 2 (here 3.23), and an interval that holds 0.
  difference = statistics.welch_interval([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0])
  assert difference.df == pytest.approx(3.0625 / (0.0578704 + 0.8888889),
                                        rel=1e-5)
  assert not difference.separated
  one = statistics.welch_interval([1.0], [2.0, 3.0])
  assert (one.mean, one.half_width, one.separated) == (-1.5, None, False)
  assert one.format() == "-1.50 (n=1, 2: no interval)"
  with pytest.raises(ValueError, match="at least one value in each group"):
    statistics.welch_interval([], [1.0])


def test_one_seed_has_no_interval():
  interval = statistics.t_interval([-3.5])
  assert (interval.n, interval.mean) == (1, -3.5)
  assert interval.half_width is None and interval.low is None
  assert interval.format() == "-3.50 (n=1, no interval)"


def _fake_pretraining(sweep_dir, name, kind, seed, held_out):
  workdir = os.path.join(sweep_dir, "pretrain", name, f"seed{seed}")
  os.makedirs(workdir)
  io_utils.atomic_write_json(os.path.join(workdir, sweeping.RECORD), dict(
      id=f"pretrain/{name}/seed{seed}", stage="pretrain", name=name,
      seed=seed, state="done", seconds=1800.0,
      config_file=f"configs/envmodels/{kind}.py:small",
      config=dict(kind=kind, jump=1, train_steps=9000, batch_size=16)))
  io_utils.atomic_write_json(os.path.join(workdir, "pretrain_done.json"),
                             dict(step=9000, held_out=held_out,
                                  export=os.path.join(workdir, "export")))


def test_the_report_states_the_latent_models_posterior_kl(tmp_path):
  """A fake sweep directory: two seeds of an sSSM (one with a collapsed
  posterior), an AR and a dSSM-DET, which have no latent."""
  sweep_dir = str(tmp_path)
  _fake_pretraining(sweep_dir, "sssm", "sssm", 0,
                    dict(log_likelihood_per_frame=-100.0, kl=2.5))
  _fake_pretraining(sweep_dir, "sssm", "sssm", 1,
                    dict(log_likelihood_per_frame=-102.0, kl=0.0001))
  _fake_pretraining(sweep_dir, "ar", "ar", 0,
                    dict(log_likelihood_per_frame=-99.0))
  # A deterministic state-space model logs a zero KL: it has no latent.
  _fake_pretraining(sweep_dir, "dssm_det", "dssm_det", 0,
                    dict(log_likelihood_per_frame=-101.0, kl=0.0))
  results = reporting.collect_results(sweep_dir)
  models = {m["name"]: m for m in results["models"]}
  kl = models["sssm"]["posterior_kl_per_step"]
  assert (kl["n"], kl["mean"]) == (2, pytest.approx(1.25005))
  assert kl["half_width"] == pytest.approx(
      statistics.t_interval([2.5, 0.0001]).half_width)
  assert [s["posterior_kl_per_step"] for s in models["sssm"]["seeds"]] == \
      [2.5, 0.0001]
  assert models["ar"]["posterior_kl_per_step"] is None
  assert models["dssm_det"]["posterior_kl_per_step"] is None
  assert "posterior_kl_per_step" not in models["ar"]["seeds"][0]
  text = reporting.markdown(dict(results, pictures={}))
  assert ("| KL (nats/step) | action effect (pixels) | open-loop MSE | "
          "copy-last-frame MSE | hours/run |") in text
  assert "| -99.0 (n=1, no interval) | - | - | - | - | - | - | 0.50 |" in text
  assert (f"| {statistics.Interval(**kl).format('.3g')} | - | - | - | 0.50 |"
          in text)


def _fake_training(sweep_dir, name, seed, eval_rows, env_steps=1000):
  """A finished training run: metrics.csv to `env_steps`, and eval.csv
  with `eval_rows` ((env_steps, return_mean, episodes), ...)."""
  workdir = os.path.join(sweep_dir, "train", name, f"seed{seed}")
  os.makedirs(workdir)
  io_utils.atomic_write_json(os.path.join(workdir, sweeping.RECORD), dict(
      id=f"train/{name}/seed{seed}", stage="train", name=name, seed=seed,
      state="done", seconds=360.0, config_file="configs/agents/a2c.py:tiny",
      config=dict(agent="a2c")))
  with open(os.path.join(workdir, "metrics.csv"), "w") as f:
    f.write("step,env_steps,episode_return\n")
    f.write(f"1,{env_steps // 2},1.0\n2,{env_steps},3.0\n")
  with open(os.path.join(workdir, "eval.csv"), "w") as f:
    f.write("step,return_mean,episodes,env_steps\n")
    for i, (at, value, episodes) in enumerate(eval_rows):
      f.write(f"{i},{value},{episodes},{at}\n")


def test_the_late_evaluation_return_averages_the_last_tenth_of_training(
    tmp_path):
  """The evaluations made during training in the last 10% of a run's env
  steps, weighted by their episodes; a run without any there has none."""
  sweep_dir = str(tmp_path)
  # Seed 0: 850 is before the last 10% of 1,000 env steps; 900 and 1,000
  # are in it, with 10 and 30 episodes.
  _fake_training(sweep_dir, "a2c", 0,
                 [(850, 100.0, 10), (900, 20.0, 10), (1000, 40.0, 30)])
  _fake_training(sweep_dir, "a2c", 1, [(950, 50.0, 10)])
  _fake_training(sweep_dir, "a2c", 2, [(500, 70.0, 10)])  # none late
  results = reporting.collect_results(sweep_dir)
  (a2c,) = results["agents"]
  seeds = {s["seed"]: s for s in a2c["seeds"]}
  assert seeds[0]["late_evaluation_return"] == pytest.approx(35.0)
  assert (seeds[0]["late_evaluations"],
          seeds[0]["late_evaluation_episodes"]) == (2, 40)
  assert seeds[1]["late_evaluation_return"] == pytest.approx(50.0)
  assert "late_evaluation_return" not in seeds[2]
  late = a2c["late_evaluation_return"]
  assert (late["n"], late["mean"]) == (2, pytest.approx(42.5))
  assert late["half_width"] == pytest.approx(
      statistics.t_interval([35.0, 50.0]).half_width)
  assert a2c["final_training_return"]["mean"] == pytest.approx(3.0)
  text = reporting.markdown(dict(results, pictures={}))
  assert ("| evaluation return | evaluation return (last 10%) | training "
          "return (last 10%) |") in text
  assert (f"| a2c | - | 3/3 | - | {statistics.Interval(**late).format()} | "
          in text)
  # The evaluations during training are drawn beside the training return.
  paths = reporting.write_report(sweep_dir)
  assert os.path.getsize(paths["agents_evaluation"]) > 1000
  report = io_utils.read_json(paths["json"])
  assert report["pictures"]["agents_evaluation"] == \
      "agents_evaluation_curves.png"
  assert "![evaluation during training](agents_evaluation_curves.png)" in \
      open(paths["markdown"]).read()


def test_the_report_compares_every_configuration_with_the_first(tmp_path):
  """Each configuration against the first (the model-free baseline of the
  grids): the difference of the means with its Welch interval, for the
  values both have with two or more seeds."""
  sweep_dir = str(tmp_path)
  for seed, (a2c, oracle) in enumerate([(10.0, 40.0), (20.0, 50.0),
                                        (30.0, 60.0)]):
    _fake_training(sweep_dir, "a2c", seed, [(1000, a2c, 10)])
    _fake_training(sweep_dir, "oracle", seed, [(1000, oracle, 10)])
  _fake_training(sweep_dir, "single", 0, [(1000, 99.0, 10)])  # one seed
  results = reporting.collect_results(sweep_dir)
  comparisons = results["comparisons"]
  late = [c for c in comparisons if c["value"] == "late_evaluation_return"]
  assert [(c["name"], c["reference"]) for c in late] == [("oracle", "a2c")]
  expected = statistics.welch_interval([40.0, 50.0, 60.0], [10.0, 20.0, 30.0])
  assert late[0]["mean"] == pytest.approx(30.0)
  assert late[0]["half_width"] == pytest.approx(expected.half_width)
  assert late[0]["separated"]
  # The training returns are equal: a difference of 0 with no spread.
  (training,) = [c for c in comparisons
                 if c["value"] == "final_training_return"]
  assert (training["mean"], training["half_width"]) == (0.0, 0.0)
  assert not training["separated"]
  text = reporting.markdown(dict(results, pictures={}))
  assert ("| oracle | training return (last 10%) | +0.00 (n=3, 3; every "
          "seed the same value on each side: no spread) | no |") in text
  assert "Against a2c: each configuration's mean minus a2c's" in text
  assert (f"| oracle | evaluation return (last 10%) | "
          f"{expected.format()} | yes |") in text
  assert "| single |" not in text.split("Against a2c")[1]


def test_runs_done_count_the_plans_runs_not_only_those_started(tmp_path):
  """A plan of three sSSM seeds, one started: 'runs done' says 1/3."""
  sweep_dir = str(tmp_path)
  _fake_pretraining(sweep_dir, "sssm", "sssm", 0,
                    dict(log_likelihood_per_frame=-100.0, kl=2.5))
  io_utils.atomic_write_json(
      os.path.join(sweep_dir, sweeping.PLAN),
      dict(name="fake", jobs=[dict(stage="pretrain", name="sssm", seed=s)
                              for s in range(3)]))
  results = reporting.collect_results(sweep_dir)
  (model,) = results["models"]
  assert (model["done"], model["runs"], results["runs_planned"]) == (1, 3, 3)
  assert "| 9000 x 16 | 1/3 |" in reporting.markdown(
      dict(results, pictures={}))


# -- Grids ---------------------------------------------------------------------

def test_a_dependency_on_an_unknown_name_is_refused_before_anything_runs(
    tmp_path):
  text = TEST_GRID.replace('envmodel="pretrain/dssm_det"',
                           'envmodel="pretrain/dssm"')
  grid = sweeping.load_grid(_grid_file(tmp_path, text))
  sweep_dir = str(tmp_path / "sweep")
  with pytest.raises(ValueError, match=r"grid train/i2a \(seed 0\), "
                     r"envmodel: 'pretrain/dssm' names no run of the grid "
                     r"\(its pretrain runs: ar, dssm_det\)"):
    sweeping.run_sweep(grid, sweep_dir, stream=io.StringIO())
  assert not os.path.exists(sweep_dir)


def test_a_wrong_field_or_stage_is_refused(tmp_path):
  grid = sweeping.load_grid(_grid_file(tmp_path, TEST_GRID))
  bad = sweeping.load_grid(_grid_file(tmp_path, TEST_GRID.replace(
      "env_steps=grid.get_ref", "env_stepz=grid.get_ref"), "bad.py"))
  with pytest.raises(ValueError, match="override 'env_stepz' is not a field"):
    sweeping.make_plan(bad, str(tmp_path / "sweep"))
  bad = sweeping.load_grid(_grid_file(tmp_path, TEST_GRID.replace(
      "grid.pretrain = tuple(", "grid.pretrian = tuple("), "bad2.py"))
  with pytest.raises(ValueError, match="'pretrian' is no stage"):
    sweeping.make_plan(bad, str(tmp_path / "sweep"))
  plan = sweeping.make_plan(grid, str(tmp_path / "sweep"))
  assert [j.id for j in sweeping.select(plan, ["train/a2c/*"])] == [
      "train/a2c/seed0", "train/a2c/seed1"]
  with pytest.raises(ValueError, match="matches no run"):
    sweeping.select(plan, ["nothing"])


def test_only_patterns_order_the_runs_by_priority(tmp_path):
  """--only's patterns in priority order: the first one's runs start
  before those only later ones match, each group in the plan's order
  (seed by seed), where the plan alone would interleave them."""
  grid = sweeping.load_grid(_grid_file(tmp_path, TEST_GRID))
  plan = sweeping.make_plan(grid, str(tmp_path / "sweep"))
  trains = [j.id for j in plan.jobs if j.stage == "train"]
  assert trains == ["train/a2c/seed0", "train/i2a/seed0",
                    "train/broken/seed0", "train/a2c/seed1"]
  selected = sweeping.select(plan, ["broken", "train/a2c/*", "a2c"])
  assert [j.id for j in selected] == [
      "train/broken/seed0", "evaluate/broken/seed0",  # both contain it
      "train/a2c/seed0", "train/a2c/seed1",
      "evaluate/a2c/seed0", "evaluate/a2c/seed1"]
  # A run matched by two patterns comes once, at the first one's rank.
  assert [j.id for j in sweeping.select(plan, ["train/a2c/seed1", "a2c"])
          ][:2] == ["train/a2c/seed1", "train/a2c/seed0"]
  # What the scheduler would start first on a fresh directory: the ready
  # runs (no evaluation is ready before its training) in that order.
  ready = sweeping._ready(sweeping.Sweep(plan), selected, attempted=set())
  assert [j.id for j in ready] == [
      "train/broken/seed0", "train/a2c/seed0", "train/a2c/seed1"]
  assert [j.id for j in sweeping.select(plan, [])] == [
      j.id for j in plan.jobs]


def test_runs_that_only_leaves_out_are_named_at_the_start(tmp_path):
  """A selection whose runs need runs that --only leaves out and that are
  not done (here the dataset, never collected) says so when it starts,
  naming both and the --only that would run them, and starts nothing."""
  grid = sweeping.load_grid(_grid_file(tmp_path, TEST_GRID))
  sweep_dir = str(tmp_path / "sweep")
  plan = sweeping.make_plan(grid, sweep_dir)
  selected = sweeping.select(plan, ["pretrain/", "evaluate_models"])
  assert sweeping.left_out(plan, selected, lambda job: False) == {
      "collect/random/seed0": ["pretrain/ar/seed0", "pretrain/dssm_det/seed0",
                               "evaluate_models/table/seed0"]}
  # Selected together, or done, they are not left out.
  assert sweeping.left_out(plan, sweeping.select(
      plan, ["collect/random/*", "pretrain/"]), lambda job: False) == {}
  assert sweeping.left_out(plan, selected, lambda job: True) == {}
  # A done run does not wait (its dataset deleted since, say).
  assert sweeping.left_out(plan, selected,
                           lambda job: job.stage == "pretrain") == {
      "collect/random/seed0": ["evaluate_models/table/seed0"]}
  result, out = _run(grid, sweep_dir, only=["pretrain/", "evaluate_models"])
  assert result["ran"] == []
  assert ("3 selected run(s) (pretrain/ar/seed0, pretrain/dssm_det/seed0, "
          "evaluate_models/table/seed0) wait for runs that --only leaves "
          "out and that are not done: collect/random/seed0. They cannot "
          "start in this invocation; add them to --only (--only=pretrain/,"
          "evaluate_models,collect/random/seed0).") in out


def test_a_collection_acts_with_a_train_runs_policy_and_waits_for_it(
    tmp_path):
  grid = sweeping.load_grid(_grid_file(tmp_path, TEST_GRID))
  grid.collect = grid.collect + (dict(
      name="played", config="configs/collect.py:tiny", policy="train/a2c",
      seeds=(1,), overrides=dict(policy_epsilon=0.5)),)
  plan = sweeping.make_plan(grid, str(tmp_path / "sweep"))
  played = plan.job("collect/played/seed1")
  assert played.deps == ("train/a2c/seed1",)
  assert played.config["policy"] == "checkpoint:" + str(
      tmp_path / "sweep" / "train" / "a2c" / "seed1")
  assert played.config["policy_epsilon"] == 0.5
  ids = [j.id for j in plan.jobs]
  for job in plan.jobs:  # every job after what it depends on
    assert all(ids.index(d) < ids.index(job.id) for d in job.deps)
  # A policy must name a train run.
  grid.collect = (dict(grid.collect[0], policy="pretrain/ar"),)
  with pytest.raises(ValueError, match=r"grid collect/\w+ \(seed 0\), "
                     r"policy: 'pretrain/ar' must name a train run"):
    sweeping.make_plan(grid, str(tmp_path / "sweep"))


def test_a_dependency_cycle_is_refused_naming_its_runs(tmp_path):
  grid = sweeping.load_grid(_grid_file(tmp_path, TEST_GRID))
  # The data of the dSSM-DET comes from the I2A that imagines with it.
  grid.collect = grid.collect + (dict(
      name="loop", config="configs/collect.py:tiny", policy="train/i2a"),)
  grid.pretrain = tuple(dict(p, data="collect/loop") if p["name"] ==
                        "dssm_det" else p for p in grid.pretrain)
  with pytest.raises(ValueError, match=r"depend on each other in a cycle: "
                     r"(\S+ -> ){3}\S+; break it"):
    sweeping.make_plan(grid, str(tmp_path / "sweep"))


def test_a_finished_run_stays_done_when_the_framework_adds_config_fields(
    tmp_path):
  """Updating the framework mid-sweep: a config field added since a run
  finished does not undo it; a changed field it had does."""
  workdir = str(tmp_path / "collect" / "random" / "seed0")
  for split in ("train", "test"):
    os.makedirs(os.path.join(workdir, "dataset", split))
    io_utils.atomic_write_json(
        os.path.join(workdir, "dataset", split, "manifest.json"), {"n": 1})
  old = dict(seed=0, protocol=dict(env_id="MiniPacman-avoid-v0"))
  finished = sweeping.Job("collect", "random", 0, workdir, old, (), 10.0)
  io_utils.atomic_write_json(os.path.join(workdir, sweeping.RECORD), dict(
      state="done", stage="collect", config=old,
      fingerprint=finished.fingerprint,
      outcome=sweeping.outcome_signature(finished)))

  def done(config):
    job = sweeping.Job("collect", "random", 0, workdir, config, (), 10.0)
    sweep = sweeping.Sweep(sweeping.Plan("g", str(tmp_path), [job], {}))
    return sweep.is_done(job), sweep.state(job)

  assert done(old)[0]
  added = dict(old, threads="auto", protocol=dict(old["protocol"], sticky=0))
  assert done(added)[0]
  changed = dict(added, seed=1)
  assert done(changed)[0] is False
  assert "its config changed since it finished" in done(changed)[1][1]
  removed = dict(seed=0)
  assert done(removed)[0] is False


@pytest.mark.parametrize("preset", ["small", "tiny"])
def test_the_table1_grid(preset, tmp_path):
  grid = sweeping.load_grid(f"configs/sweeps/table1_small.py:{preset}")
  plan = sweeping.make_plan(grid, str(tmp_path))
  pretrain = [j for j in plan.jobs if j.stage == "pretrain"]
  names = sorted({j.name for j in pretrain})
  assert names == sorted(["vae", "ar", "rar", "dssm_det", "dssm_vae", "sssm",
                          "jumpy_dssm_det", "jumpy_sssm"])
  seeds = (0, 1) if preset == "small" else (0,)
  assert sorted({j.seed for j in pretrain}) == list(seeds)
  assert len(pretrain) == 8 * len(seeds)
  # One budget for every model, all on the one dataset collected first.
  assert len({(j.config["train_steps"], j.config["batch_size"])
              for j in pretrain}) == 1
  assert {j.deps for j in pretrain} == {("collect/behaviour/seed0",)}
  # The data comes from a trained A2C (one run for every model seed),
  # epsilon-mixed, collected after it and under its protocol.
  collect = plan.job("collect/behaviour/seed0")
  behaviour = plan.job("train/behaviour/seed0")
  assert collect.deps == (behaviour.id,)
  assert collect.config["policy"] == "checkpoint:" + behaviour.workdir
  assert collect.config["policy_epsilon"] == 0.2
  assert behaviour.config["agent"] == "a2c"
  assert behaviour.config["protocol"] == collect.config["protocol"]
  ids = [j.id for j in plan.jobs]
  assert ids.index(behaviour.id) < ids.index(collect.id) < ids.index(
      pretrain[0].id)
  assert [j.seed for j in plan.jobs if j.stage == "train"] == [0]
  jumps = {j.name: j.config["jump"] for j in pretrain}
  assert jumps["jumpy_dssm_det"] == jumps["jumpy_sssm"] == 3
  assert {v for k, v in jumps.items() if not k.startswith("jumpy")} == {1}
  tables = [j for j in plan.jobs if j.stage == "evaluate_models"]
  assert len(tables) == len(seeds)
  for table in tables:
    assert len(table.config["models"]) == 8
    assert all(f"/seed{table.seed}/export" in m
               for m in table.config["models"])
  if preset == "small":  # MsPacman at 104x80
    protocol = plan.job("collect/behaviour/seed0").config["protocol"]
    assert protocol["env_id"] == "ALE/MsPacman-v5"
    assert protocol["observation_size"] == [104, 80]


@pytest.mark.parametrize("preset", ["minipacman", "regular", "hunt", "tiny"])
def test_the_i2a_minipacman_grid(preset, tmp_path):
  grid = sweeping.load_grid(f"configs/sweeps/i2a_minipacman.py:{preset}")
  plan = sweeping.make_plan(grid, str(tmp_path))
  train = [j for j in plan.jobs if j.stage == "train"]
  by_name = {}
  for job in train:
    by_name.setdefault(job.name, []).append(job)
  full = preset != "tiny"
  depths = (1, 2, 4) if full else (1,)
  free_nats = (["distill_sssm_free_nats", "imagination_prior_free_nats"]
               if preset in ("regular", "hunt") else [])
  assert list(by_name) == [
      "a2c", "copy_model", "distill_dssm_det", "distill_sssm",
      "learning_to_query", "imagination_prior", "uniform_rollouts",
      "pixel_imagination", "emulator_oracle"] + [
          f"depth_{t}" for t in depths] + free_nats
  seeds = [0, 1, 2] if full else [0]
  for jobs in by_name.values():
    assert [j.seed for j in jobs] == seeds
  config = {name: jobs[0].config for name, jobs in by_name.items()}
  env_id = {"regular": "MiniPacman-regular-v0",
            "hunt": "MiniPacman-hunt-v0"}.get(preset, "MiniPacman-avoid-v0")
  assert all(c["protocol"]["env_id"] == env_id for c in config.values())
  # The collected data is of the same task.
  assert plan.jobs[0].config["protocol"]["env_id"] == env_id
  if full:
    assert all(j.config["env_steps"] >= 1_000_000 for j in train)
    assert grid.name == f"i2a_minipacman_{preset}"
  else:  # the tiny presets' short episodes are kept
    assert config["a2c"]["protocol"]["max_episode_frames"] == 12
  net = {name: c.get("network", {}) for name, c in config.items()}
  assert config["a2c"]["agent"] == "a2c" and not config["a2c"]["envmodel"]
  assert net["copy_model"]["model"] == "copy"
  assert net["learning_to_query"]["rollout_policy"] == "learning_to_query"
  assert net["imagination_prior"]["rollout_policy"] == "imagination_prior"
  assert net["uniform_rollouts"]["rollout_policy"] == "random"
  assert net["pixel_imagination"]["imagination"] == "pixels"
  assert net["emulator_oracle"]["model"] == "oracle"
  assert not config["emulator_oracle"]["envmodel"]
  assert by_name["distill_sssm"][0].deps == ("pretrain/sssm/seed0",)
  assert by_name["imagination_prior"][0].deps == (
      "pretrain/sssm_action_free/seed0",)
  prior = plan.job("pretrain/sssm_action_free/seed0").config
  assert prior["kind"] == "sssm" and prior["action_free"]
  # Agent seed s imagines with the model of seed s.
  for job in by_name["distill_dssm_det"]:
    assert job.deps == (f"pretrain/dssm_det/seed{job.seed}",)
  if free_nats:  # the same sSSMs with free nats, and the agents over them
    for name in ("sssm", "sssm_action_free"):
      plain = plan.job(f"pretrain/{name}/seed0").config
      freed = plan.job(f"pretrain/{name}_free_nats/seed0").config
      assert plain["loss"]["free_nats"] == 0.0
      assert freed["loss"]["free_nats"] == 3.0
      assert ({k: v for k, v in freed.items() if k != "loss"} ==
              {k: v for k, v in plain.items() if k != "loss"})
    assert by_name["distill_sssm_free_nats"][1].deps == (
        "pretrain/sssm_free_nats/seed1",)
    assert by_name["imagination_prior_free_nats"][0].deps == (
        "pretrain/sssm_action_free_free_nats/seed0",)
    assert net["imagination_prior_free_nats"]["rollout_policy"] == (
        "imagination_prior")
    assert job.config["envmodel"].endswith(
        f"pretrain/dssm_det/seed{job.seed}/export")
  assert sum(j.stage == "evaluate" for j in plan.jobs) == len(train)
  # Claim 3: distill_dssm_det at other rollout depths, nothing else changed.
  base = dict(config["distill_dssm_det"], network=None)
  for tau in depths:
    assert net[f"depth_{tau}"]["depth"] == tau
    assert dict(config[f"depth_{tau}"], network=None) == base
    assert by_name[f"depth_{tau}"][0].deps == ("pretrain/dssm_det/seed0",)
  if preset == "hunt":  # the regular grid on another task, nothing else
    regular = sweeping.make_plan(
        sweeping.load_grid("configs/sweeps/i2a_minipacman.py:regular"),
        str(tmp_path))
    assert [j.id for j in regular.jobs] == [j.id for j in plan.jobs]
    for job in plan.jobs:
      ours, theirs = job.config, regular.job(job.id).config
      if "protocol" in ours:
        assert theirs["protocol"]["env_id"] == "MiniPacman-regular-v0"
        ours = dict(ours, protocol=dict(
            ours["protocol"], env_id="MiniPacman-regular-v0"))
      assert ours == theirs, job.id


def test_the_agent_data_grid_collects_with_a_playing_agent(tmp_path):
  grid = sweeping.load_grid(
      "configs/sweeps/i2a_minipacman.py:regular_agent_data")
  plan = sweeping.make_plan(grid, str(tmp_path))
  ids = [j.id for j in plan.jobs]
  # The behaviour A2C first (one seed), its data, the models, the agents.
  assert ids[:2] == ["train/behaviour/seed0", "collect/behaviour/seed0"]
  collect = plan.job("collect/behaviour/seed0")
  assert collect.deps == ("train/behaviour/seed0",)
  assert collect.config["policy"] == (
      "checkpoint:" + str(tmp_path / "train/behaviour/seed0"))
  assert collect.config["policy_epsilon"] == 0.2
  assert collect.config["train_steps"] == 50_000
  behaviour = plan.job("train/behaviour/seed0").config
  assert behaviour["agent"] == "a2c" and behaviour["env_steps"] == 1_000_000
  for seed in (0, 1, 2):
    model = plan.job(f"pretrain/dssm_det/seed{seed}")
    assert model.deps == ("collect/behaviour/seed0",)
    assert model.config["data"] == str(
        tmp_path / "collect/behaviour/seed0/dataset")
    agent = plan.job(f"train/distill_dssm_det/seed{seed}")
    assert agent.deps == (f"pretrain/dssm_det/seed{seed}",)
  # Everything else as the regular grid's distillation and models.
  regular = sweeping.make_plan(
      sweeping.load_grid("configs/sweeps/i2a_minipacman.py:regular"),
      str(tmp_path))
  for job_id in ("train/distill_dssm_det/seed1", "pretrain/dssm_det/seed1"):
    ours, theirs = plan.job(job_id).config, regular.job(job_id).config
    different = {k for k in set(ours) | set(theirs)
                 if ours.get(k) != theirs.get(k)}
    assert different <= {"data"}, different
  assert all(c["protocol"]["env_id"] == "MiniPacman-regular-v0"
             for c in (collect.config, behaviour))
  assert sorted({j.name for j in plan.jobs if j.stage == "train"}) == [
      "behaviour", "distill_dssm_det"]


@pytest.mark.parametrize("section,field,preset_value,value", [
    ("optimizer", "learning_rate", 2e-3, 7e-4),
    ("loss", "entropy_coef", 0.03, 0.1)])
def test_an_unset_grid_field_overrides_nothing_and_a_set_one_every_agent(
    tmp_path, section, field, preset_value, value):
  """grid.learning_rate, grid.entropy_coef: unset, every agent keeps its
  preset's value and its recorded overrides name none; set, every agent
  but the behaviour run (the data's agent) trains with it, and nothing
  else changes."""
  assert sweeping._without_unset(
      dict(a=None, b=1, c=dict(d=None), e=dict(f=None, g=2))) == dict(
          b=1, e=dict(g=2))
  for preset in ("regular", "regular_agent_data"):
    grid = sweeping.load_grid(f"configs/sweeps/i2a_minipacman.py:{preset}")
    unset = sweeping.make_plan(grid, str(tmp_path))
    setattr(grid, field, value)
    changed = sweeping.make_plan(grid, str(tmp_path))
    for job in unset.jobs:
      other = changed.job(job.id)
      if job.stage != "train":
        assert other.config == job.config, job.id
        continue
      assert job.config[section][field] == preset_value
      assert section not in job.overrides
      if job.name == "behaviour":
        assert other.config == job.config
        continue
      assert other.config[section][field] == value
      assert other.overrides[section] == {field: value}
      assert (dict(other.config, **{section: None})
              == dict(job.config, **{section: None})), job.id
      assert ({k: v for k, v in other.config[section].items()
               if k != field} ==
              {k: v for k, v in job.config[section].items() if k != field})


# -- Running -------------------------------------------------------------------

@pytest.fixture(scope="module")
def swept(tmp_path_factory):
  """The test grid run twice: every stage, a failure, then a rerun."""
  tmp = tmp_path_factory.mktemp("sweep")
  grid_file = _grid_file(tmp, TEST_GRID)
  sweep_dir = str(tmp / "sweep")
  listed_before = sweeping.list_runs(
      sweeping.make_plan(sweeping.load_grid(grid_file), sweep_dir))
  first, first_output = _run(sweeping.load_grid(grid_file), sweep_dir)
  report = io_utils.read_json(first["report"]["json"])
  markdown = open(first["report"]["markdown"]).read()
  records = {job_id: _record(sweep_dir, job_id) for job_id in first["ran"]}
  mtimes = {job_id: os.stat(os.path.join(sweep_dir, job_id,
                                         sweeping.RECORD)).st_mtime_ns
            for job_id in first["ran"]}
  done_marker = os.path.join(sweep_dir, "pretrain", "dssm_det", "seed0",
                             "pretrain_done.json")
  marker_mtime = os.stat(done_marker).st_mtime_ns
  listed = sweeping.list_runs(
      sweeping.make_plan(sweeping.load_grid(grid_file), sweep_dir))
  second, second_output = _run(sweeping.load_grid(grid_file), sweep_dir)
  return dict(
      grid_file=grid_file, sweep_dir=sweep_dir, first=first,
      first_output=first_output, report=report, markdown=markdown,
      records=records, mtimes=mtimes, done_marker=done_marker,
      marker_mtime=marker_mtime, listed_before=listed_before, listed=listed,
      second=second, second_output=second_output)


def test_a_tiny_grid_runs_end_to_end_and_writes_the_table_and_curves(swept):
  first, sweep_dir = swept["first"], swept["sweep_dir"]
  ok = ["collect/random/seed0", "pretrain/ar/seed0", "pretrain/dssm_det/seed0",
        "evaluate_models/table/seed0", "train/a2c/seed0", "train/a2c/seed1",
        "train/i2a/seed0", "evaluate/a2c/seed0", "evaluate/a2c/seed1",
        "evaluate/i2a/seed0"]
  assert sorted(first["done"]) == sorted(ok)
  assert first["failed"] == ["train/broken/seed0"]
  assert first["pending"] == ["evaluate/broken/seed0"]
  assert not first["stopped"]
  # Each run in its own workdir, with its resolved config recorded.
  a2c = swept["records"]["train/a2c/seed1"]
  assert a2c["state"] == "done" and a2c["attempts"] == 1
  assert a2c["config"]["seed"] == 1 and a2c["config"]["env_steps"] == 48
  saved = io_utils.read_json(os.path.join(sweep_dir, "train", "a2c", "seed1",
                                          "config.json"))
  assert saved == a2c["config"]
  i2a = swept["records"]["train/i2a/seed0"]["config"]
  assert i2a["envmodel"] == os.path.join(sweep_dir, "pretrain", "dssm_det",
                                         "seed0", "export")
  # The evaluations ran right after their training run.
  ran = first["ran"]
  assert ran.index("evaluate/a2c/seed0") == ran.index("train/a2c/seed0") + 1
  assert "runs done" in swept["first_output"] and "ETA" in swept[
      "first_output"]

  report, markdown = swept["report"], swept["markdown"]
  agents = {a["name"]: a for a in report["agents"]}
  scores = [io_utils.read_json(os.path.join(
      sweep_dir, "train", "a2c", f"seed{s}", "eval", "scores.json"))["mean"]
            for s in (0, 1)]
  expected = statistics.t_interval(scores)
  evaluation = agents["a2c"]["evaluation_return"]
  assert evaluation["n"] == 2
  assert evaluation["mean"] == pytest.approx(expected.mean)
  assert evaluation["half_width"] == pytest.approx(expected.half_width)
  # The final training return: the mean over the last 10% of env steps.
  finals = []
  for seed in (0, 1):
    path = os.path.join(sweep_dir, "train", "a2c", f"seed{seed}",
                        "metrics.csv")
    steps = read_column(path, "env_steps")
    returns = read_column(path, "episode_return")
    keep = (steps >= 0.9 * steps[-1]) & np.isfinite(returns)
    finals.append(float(returns[keep].mean()))
  assert agents["a2c"]["final_training_return"]["mean"] == pytest.approx(
      sum(finals) / 2)
  assert agents["i2a"]["evaluation_return"]["n"] == 1
  assert agents["i2a"]["evaluation_return"]["half_width"] is None
  assert agents["i2a"]["envmodel"] == "pretrain/dssm_det"
  assert agents["broken"]["done"] == 0
  assert agents["broken"]["evaluation_return"] is None
  models = {m["name"]: m for m in report["models"]}
  held_out = io_utils.read_json(swept["done_marker"])["held_out"]
  assert models["dssm_det"]["held_out_nats_per_frame"]["mean"] == \
      pytest.approx(held_out["log_likelihood_per_frame"])
  assert models["ar"]["relative_rollout_time"]["mean"] == pytest.approx(1.0)
  # The action effect T model steps ahead, from the seed's model table.
  table = io_utils.read_json(os.path.join(
      swept["sweep_dir"], "evaluate_models", "table", "seed0",
      "model_table.json"))
  for row in table["models"]:
    name = os.path.basename(os.path.dirname(os.path.dirname(row["export"])))
    assert models[name]["action_changed_pixels"]["mean"] == pytest.approx(
        row["action_changed_pixels"][-1])
    # The open-loop MSE T model steps ahead, beside copying the last frame.
    assert models[name]["open_loop_mse"]["mean"] == pytest.approx(
        row["open_loop_mse"][-1])
    assert models[name]["copy_last_frame_mse"]["mean"] == pytest.approx(
        row["copy_last_frame_mse"][-1])
    assert models[name]["seeds"][0]["open_loop_mse"] == pytest.approx(
        row["open_loop_mse"][-1])
  assert models["dssm_det"]["relative_rollout_time"]["mean"] > 0
  open_loop = statistics.Interval(**models["dssm_det"]["open_loop_mse"])
  assert f"| {open_loop.format('.5f')} |" in swept["markdown"]
  assert report["failures"][0]["id"] == "train/broken/seed0"
  for text in ("| a2c | - | 2/2 |", "(n=2)", "| i2a | pretrain/dssm_det |",
               "(n=1, no interval)", "| dssm_det | dssm_det | 1 | 4 x 4 |",
               "| 1.000 (n=1, no interval) |", "## Failed runs",
               "train/broken/seed0", "agents_learning_curves.png",
               "models_held_out.png"):
    assert text in markdown, text
  for name in ("agents_learning_curves.png", "agents_evaluation_curves.png",
               "models_held_out.png"):
    assert os.path.getsize(os.path.join(sweep_dir, "report", name)) > 1000
  assert set(report["pictures"]) == {"agents", "agents_evaluation", "models"}


def test_a_failed_run_is_recorded_and_does_not_block_independent_runs(swept):
  record = swept["records"]["train/broken/seed0"]
  assert record["state"] == "failed"
  assert record["error"].startswith("ValueError: config.batch_size (3) must "
                                    "be a multiple of config.num_envs (2)")
  assert "Traceback" in open(os.path.join(
      swept["sweep_dir"], "train", "broken", "seed0", sweeping.LOG)).read()
  # Its evaluation waits; the runs after it in the grid ran.
  ran = swept["first"]["ran"]
  assert "evaluate/broken/seed0" not in ran
  assert ran.index("train/broken/seed0") < ran.index("evaluate/a2c/seed1")
  assert "waits for train/broken/seed0 (train/broken/seed0 failed)" in \
      swept["listed"]


def test_list_states(swept):
  before = swept["listed_before"].splitlines()
  assert before[0].endswith("0 done, 0 running, 0 failed, 12 pending of "
                            "12 runs")
  assert any(line.startswith("pending  train/i2a/seed0") and
             "waits for pretrain/dssm_det/seed0" in line for line in before)
  lines = {line.split()[1]: line for line in swept["listed"].splitlines()[2:]}
  assert lines["train/a2c/seed0"].startswith("done ")
  assert "100.0% of 48 env steps" in lines["train/a2c/seed0"]
  assert lines["train/broken/seed0"].startswith("failed ")
  assert "ValueError: config.batch_size (3)" in lines["train/broken/seed0"]
  assert lines["evaluate/broken/seed0"].startswith("pending ")
  assert "10 done, 0 running, 1 failed, 1 pending of 12 runs" in swept[
      "listed"]


def test_a_second_invocation_skips_finished_runs_and_retries_failed_ones(
    swept):
  second, sweep_dir = swept["second"], swept["sweep_dir"]
  assert second["ran"] == ["train/broken/seed0"]  # the failed one, again
  assert "10 of 12 runs are done already: skipped" in swept["second_output"]
  for job_id, mtime in swept["mtimes"].items():
    if job_id != "train/broken/seed0":
      path = os.path.join(sweep_dir, job_id, sweeping.RECORD)
      assert os.stat(path).st_mtime_ns == mtime, job_id
      assert _record(sweep_dir, job_id)["attempts"] == 1
  assert os.stat(swept["done_marker"]).st_mtime_ns == swept["marker_mtime"]
  assert _record(sweep_dir, "train/broken/seed0")["attempts"] == 2
  sweep = io_utils.read_json(os.path.join(sweep_dir, sweeping.SWEEP))
  assert [len(i["ran"]) for i in sweep["invocations"]] == [11, 1]


def test_a_rerun_resumes_a_raised_budget_and_runs_the_fixed_run(swept):
  sweep_dir = swept["sweep_dir"]
  metrics = os.path.join(sweep_dir, "train", "a2c", "seed0", "metrics.csv")
  steps_before = read_column(metrics, "env_steps").tolist()
  grid = sweeping.load_grid(swept["grid_file"])
  grid.a2c_steps = 72  # the budget, raised (through the shared reference)
  grid.broken_batch = 2  # the failure, fixed
  i2a_mtime = os.stat(os.path.join(sweep_dir, "train", "i2a", "seed0",
                                   sweeping.RECORD)).st_mtime_ns
  result, _ = _run(grid, sweep_dir)
  assert sorted(result["ran"]) == sorted([
      "train/a2c/seed0", "train/a2c/seed1", "evaluate/a2c/seed0",
      "evaluate/a2c/seed1", "train/broken/seed0", "evaluate/broken/seed0"])
  assert not result["failed"] and not result["pending"]
  steps = read_column(metrics, "env_steps").tolist()
  assert steps[:len(steps_before)] == steps_before  # resumed, not restarted
  assert steps[-1] == 72
  record = _record(sweep_dir, "train/a2c/seed0")
  assert record["attempts"] == 2 and record["state"] == "done"
  assert record["units"] == 72  # env steps trained over both attempts
  scores = io_utils.read_json(os.path.join(sweep_dir, "train", "a2c", "seed0",
                                           "eval", "scores.json"))
  assert scores["env_steps"] == 72  # evaluated again, at the new checkpoint
  assert os.stat(os.path.join(sweep_dir, "train", "i2a", "seed0",
                              sweeping.RECORD)).st_mtime_ns == i2a_mtime
  report = io_utils.read_json(result["report"]["json"])
  assert {a["name"]: a["done"] for a in report["agents"]}["broken"] == 1
  assert not report["failures"]


def test_a_started_run_whose_input_changed_is_refused(swept):
  sweep_dir = swept["sweep_dir"]
  # The dSSM-DET the I2A imagines with is exported anew (as far as the
  # sweep can tell: its completion marker changed).
  with open(swept["done_marker"], "a") as f:
    f.write(" ")
  grid = sweeping.load_grid(swept["grid_file"])
  grid.a2c_steps, grid.broken_batch = 72, 2  # as the test before sets them
  grid.i2a_steps = 42  # the I2A would continue: its budget grew
  result, output = _run(grid, sweep_dir)
  assert "train/i2a/seed0" in result["failed"]
  error = _record(sweep_dir, "train/i2a/seed0")["error"]
  assert error.startswith("pretrain/dssm_det/seed0 changed since this run "
                          "started from it; continuing would mix two "
                          "experiments: delete ")
  assert "train/i2a/seed0 failed" in output
  # Derived runs are recomputed instead: the table of that seed ran again.
  ran = result["ran"]  # the export again (its marker changed), then:
  assert ran.index("pretrain/dssm_det/seed0") < ran.index(
      "evaluate_models/table/seed0") < ran.index("train/i2a/seed0")
  assert "evaluate_models/table/seed0" in result["done"]
  # Training never started over on it: it is where it was.
  assert read_column(os.path.join(sweep_dir, "train", "i2a", "seed0",
                                  "metrics.csv"), "env_steps")[-1] == 36


def test_a_stopped_pretraining_run_checkpoints_the_step_it_reached(tmp_path):
  from configs import collect as collect_config  # pylint: disable=import-outside-toplevel
  from configs.envmodels import dssm_det  # pylint: disable=import-outside-toplevel
  from i2a.run import collect as collection  # pylint: disable=import-outside-toplevel

  class StopAfter:
    """A stop request seen from the `calls`-th question on."""

    def __init__(self, calls):
      self.calls, self.asked = calls, 0

    def is_set(self):
      self.asked += 1
      return self.asked > self.calls

  collection.run(collect_config.get_config("tiny"), str(tmp_path / "data"))
  config = dssm_det.get_config("tiny")
  config.data = str(tmp_path / "data" / "dataset")
  config.train_steps = 100
  config.checkpoint_every = config.eval_every = config.image_every = 100
  workdir = str(tmp_path / "run")
  status, summary = sweeping._run_pretrain(config, workdir, StopAfter(5))  # pylint: disable=protected-access
  assert (status, summary) == ("stopped", dict(step=5))
  pointer = open(os.path.join(workdir, "checkpoints", "checkpoint")).read()
  assert 'model_checkpoint_path: "ckpt-5"' in pointer
  assert read_column(os.path.join(workdir, "metrics.csv"),
                     "step").tolist() == [4.0]
  config.train_steps = 8
  status, summary = sweeping._run_pretrain(config, workdir, StopAfter(99))  # pylint: disable=protected-access
  assert status == "done" and "log_likelihood_per_frame" in summary[
      "held_out"]
  # Resumed at step 5: the rows before it kept, the steps after it added.
  assert read_column(os.path.join(workdir, "metrics.csv"),
                     "step").tolist() == [4.0, 8.0]
  assert io_utils.read_json(os.path.join(workdir, "pretrain_done.json"))[
      "step"] == 8


def test_durations():
  assert sweeping.parse_duration("2h50m") == 10_200
  assert sweeping.parse_duration("170m") == 10_200
  assert sweeping.parse_duration("45s") == 45
  assert sweeping.parse_duration("10200") == 10_200
  with pytest.raises(ValueError, match="a duration is like"):
    sweeping.parse_duration("soon")


def test_a_stop_request_checkpoints_the_run_and_a_later_invocation_resumes(
    tmp_path):
  grid_file = _grid_file(tmp_path, LONG_GRID)
  sweep_dir = str(tmp_path / "sweep")
  run_dir = os.path.join(sweep_dir, "train", "a2c", "seed0")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  log = open(tmp_path / "sweep.log", "wb")
  process = subprocess.Popen(
      [sys.executable, "-m", "i2a.sweep", f"--grid={grid_file}",
       f"--workdir={sweep_dir}"], cwd=REPO, env=env, stdout=log,
      stderr=subprocess.STDOUT)
  try:
    deadline = time.monotonic() + 240
    metrics = os.path.join(run_dir, "metrics.csv")
    while not (os.path.exists(os.path.join(run_dir, "checkpoints",
                                           "checkpoint"))
               and os.path.exists(metrics)
               and _last_step(metrics) >= 12):
      assert process.poll() is None, open(tmp_path / "sweep.log").read()
      assert time.monotonic() < deadline, "the run did not start"
      time.sleep(0.5)
    plan = sweeping.make_plan(sweeping.load_grid(grid_file), sweep_dir)
    listed = sweeping.list_runs(plan)
    assert "(an invocation runs now: pid" in listed
    assert any(line.startswith("running  train/a2c/seed0")
               for line in listed.splitlines())
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=240) == sweeping.EXIT_STOPPED
  finally:
    if process.poll() is None:
      process.kill()
    log.close()
  record = _record(sweep_dir, "train/a2c/seed0")
  assert record["state"] == "stopped" and record["attempts"] == 1
  # The stop came between updates: the last one is logged and checkpointed.
  stopped_step = int(read_column(metrics, "step")[-1])
  pointer = open(os.path.join(run_dir, "checkpoints", "checkpoint")).read()
  assert f'model_checkpoint_path: "ckpt-{stopped_step}"' in pointer
  listed = sweeping.list_runs(plan)
  assert "pending  train/a2c/seed0" in listed and "stopped" in listed
  rows_before = read_column(metrics, "step").tolist()
  # The next invocation (a smaller budget, past the stop: it ends there).
  grid = sweeping.load_grid(grid_file)
  stopped_env_steps = int(read_column(metrics, "env_steps")[-1])
  grid.env_steps = stopped_env_steps + 12  # two more updates
  result, _ = _run(grid, sweep_dir)
  assert result["done"] == ["train/a2c/seed0"]
  steps = read_column(metrics, "step").tolist()
  assert steps[:len(rows_before)] == rows_before
  assert steps[-1] == stopped_step + 2
  record = _record(sweep_dir, "train/a2c/seed0")
  assert record["state"] == "done" and record["attempts"] == 2
  # The binary's --list on the finished sweep.
  listing = subprocess.run(
      [sys.executable, "-m", "i2a.sweep", f"--grid={grid_file}",
       f"--workdir={sweep_dir}", "--list",
       f"--grid.env_steps={stopped_env_steps + 12}"], cwd=REPO, env=env,
      capture_output=True, text=True, check=True).stdout
  assert "1 done, 0 running, 0 failed, 0 pending of 1 runs" in listing
  assert json.loads(open(os.path.join(sweep_dir, "report",
                                      "report.json")).read())["agents"]


def test_two_runs_at_once_and_only_runs_that_fit_in_the_time_left(
    tmp_path):
  grid_file = _grid_file(tmp_path, PAIR_GRID)
  sweep_dir = str(tmp_path / "sweep")
  with pytest.raises(ValueError, match="jobs must be at least 1"):
    _run(sweeping.load_grid(grid_file), sweep_dir, jobs=0)
  with pytest.raises(ValueError, match="give the limit too"):
    _run(sweeping.load_grid(grid_file), sweep_dir, fit_runs=True)
  result, output = _run(sweeping.load_grid(grid_file), sweep_dir, jobs=2)
  runs = ["train/a2c/seed0", "train/a2c/seed1"]
  assert sorted(result["done"]) == runs and not result["stopped"]
  records = [_record(sweep_dir, run) for run in runs]
  # Both ran at once: each started before the other finished.
  assert records[0]["started"] <= records[1]["finished"]
  assert records[1]["started"] <= records[0]["finished"]
  assert all(r["units"] == 24 for r in records)
  # Budgets raised to 48 env steps; the records say a run took 10^6 s for
  # its 24: the 24 left of each would take as long, past a 10-minute limit.
  for run, record in zip(runs, records):
    record["seconds"] = 1e6
    io_utils.atomic_write_json(
        os.path.join(sweep_dir, run, sweeping.RECORD), record)
  grid = sweeping.load_grid(grid_file)
  grid.env_steps = 48
  plan = sweeping.make_plan(grid, sweep_dir)
  rates = sweeping._rates(plan)  # pylint: disable=protected-access
  assert sweeping.expected_seconds(plan.job(runs[0]), rates) == \
      pytest.approx(1e6)
  result, output = _run(grid, sweep_dir, stop_after_s=600, fit_runs=True)
  assert result["ran"] == [] and result["stopped"]
  assert sorted(result["pending"]) == runs
  assert "2 ready run(s) would not finish in the" in output
  assert "stopping" in output
  # A limit they fit in: both run (one at a time), to their new budget.
  for run, record in zip(runs, records):
    record["seconds"] = 10.0
    io_utils.atomic_write_json(
        os.path.join(sweep_dir, run, sweeping.RECORD), record)
  result, _ = _run(grid, sweep_dir, stop_after_s=600, fit_runs=True)
  assert sorted(result["done"]) == runs and result["ran"] == runs
  assert all(_record(sweep_dir, run)["units"] == 48 for run in runs)


def test_a_running_attempt_is_timed_at_its_own_rate(tmp_path):
  """The ETA and --fit_runs use the attempts running now: seed 0's
  attempts ran at 1 env step/s; seed 1's did too and its attempt running
  now went from 40 to 240 env steps in 100 s (2/s); where the sweep
  process of an attempt marked running is gone, that attempt counts for
  nothing."""
  import datetime  # pylint: disable=import-outside-toplevel
  import socket  # pylint: disable=import-outside-toplevel
  grid = sweeping.load_grid(_grid_file(tmp_path, PAIR_GRID))
  grid.env_steps = 1000
  plan = sweeping.make_plan(grid, str(tmp_path / "sweep"))
  done, running = plan.job("train/a2c/seed0"), plan.job("train/a2c/seed1")
  started = (datetime.datetime.now() - datetime.timedelta(seconds=100)
             ).isoformat(timespec="seconds")
  for job, record in (
      (done, dict(state="stopped", units=100.0, seconds=100.0)),
      (running, dict(state="running", units=40.0, seconds=40.0,
                     progress_at_start=40.0, started=started,
                     host=socket.gethostname(), pid=os.getpid()))):
    os.makedirs(job.workdir)
    io_utils.atomic_write_json(os.path.join(job.workdir, sweeping.RECORD),
                               dict(record, id=job.id, stage="train"))
  with open(os.path.join(running.workdir, "metrics.csv"), "w") as f:
    f.write("step,env_steps\n1,100\n2,240\n")
  by_config, by_stage = sweeping._rates(plan)  # pylint: disable=protected-access
  # 100 + 40 + 200 env steps in 100 + 40 + ~100 s.
  assert by_config["train/a2c"] == pytest.approx(340 / 240, rel=0.02)
  assert by_stage["train"] == by_config["train/a2c"]
  # The sweep process that ran it has died: its attempt is not counted.
  record = _record(str(tmp_path / "sweep"), running.id)
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True)
  record["pid"] = int(dead.stdout)
  io_utils.atomic_write_json(os.path.join(running.workdir, sweeping.RECORD),
                             record)
  by_config, _ = sweeping._rates(plan)  # pylint: disable=protected-access
  assert by_config["train/a2c"] == pytest.approx(140 / 140)


def test_a_started_run_resumes_before_a_new_one_starts(tmp_path):
  """Seed 1 was stopped part-way (its metrics.csv reached 12 env steps):
  a later invocation takes it up before seed 0, which never started,
  though seed 0 comes first in the plan."""
  plan = sweeping.make_plan(sweeping.load_grid(_grid_file(tmp_path,
                                                          PAIR_GRID)),
                            str(tmp_path / "sweep"))
  sweep = sweeping.Sweep(plan)
  ids = [j.id for j in sweeping._ready(sweep, plan.jobs, set())]  # pylint: disable=protected-access
  assert ids == ["train/a2c/seed0", "train/a2c/seed1"]
  stopped = plan.job("train/a2c/seed1")
  os.makedirs(stopped.workdir)
  with open(os.path.join(stopped.workdir, "metrics.csv"), "w") as f:
    f.write("step,env_steps\n1,12\n")
  assert sweeping.progress_units(stopped) == 12
  ids = [j.id for j in sweeping._ready(sweep, plan.jobs, set())]  # pylint: disable=protected-access
  assert ids == ["train/a2c/seed1", "train/a2c/seed0"]
  job, passed = sweeping._next_job(sweep, plan.jobs, set())  # pylint: disable=protected-access
  assert job.id == "train/a2c/seed1" and passed == []


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["configs/sweeps/table1_small.py:tiny",
                                  "configs/sweeps/i2a_minipacman.py:tiny"])
def test_the_experiment_grids_run_end_to_end_at_their_tiny_preset(
    spec, tmp_path):
  grid = sweeping.load_grid(spec)
  result, _ = _run(grid, str(tmp_path))
  assert not result["failed"] and not result["pending"], result
  report = io_utils.read_json(result["report"]["json"])
  plan = sweeping.make_plan(grid, str(tmp_path))
  names = {(j.stage, j.name) for j in plan.jobs}
  models = {m["name"]: m for m in report["models"]}
  agents = {a["name"]: a for a in report["agents"]}
  assert set(models) == {n for s, n in names if s == "pretrain"}
  assert set(agents) == {n for s, n in names if s == "train"}
  for model in models.values():
    assert model["done"] == model["runs"] == 1
    assert model["held_out_nats_per_frame"]["n"] == 1
  for agent in agents.values():
    assert agent["done"] == agent["runs"] == 1
    assert agent["evaluation_return"]["n"] == 1
  if "ar" in models:  # Table 1: every model timed against AR
    assert models["ar"]["relative_rollout_time"]["mean"] == pytest.approx(1)
    assert all(m["relative_rollout_time"] for m in models.values())
