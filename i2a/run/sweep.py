"""The runtime of `python -m i2a.sweep`: a grid of runs, done across sessions.

A grid file (configs/sweeps/NAME.py, `get_config(preset)` returns an
ml_collections ConfigDict; format in docs/experiments.md) lists runs by
stage. Each run names its binary's config file with overrides and seeds,
and what it depends on by name:

  collect          python -m i2a.collect          a dataset; `policy`: a
                                                  train run whose newest
                                                  checkpoint acts ('' the
                                                  uniform random policy)
  pretrain         python -m i2a.pretrain         an envmodel export;
                                                  `data`: a collect run
  evaluate_models  python -m i2a.evaluate_models  Table 1 for the exports
                                                  of one seed; `models`
  train            python -m i2a.train            an agent; `envmodel`: a
                                                  pretrain run ('' none)
  evaluate         python -m i2a.evaluate         every train run, with
                                                  `grid.evaluate.episodes`

`make_plan` resolves the grid into jobs, one per run and seed, each with
its own workdir SWEEP_DIR/STAGE/NAME/seedN, and refuses a grid whose
references, fields or config files are wrong before anything is written.
A reference is 'stage/name/seedN', or 'stage/name': the run of the
referring run's seed, or the only seed of that run.

Running (`run_sweep`): one job at a time, each in a child process
(`python -m i2a.run.sweep JOB_FILE`: a crash, a leak or a process-wide
setting such as the compute precision stays with its run, and a new
process starts from a clean TensorFlow), in dependency order, evaluations
first when they are ready. A job's record `sweep_run.json` in its workdir
holds its state, resolved config, attempts, error and the measured time;
its output goes to `sweep_run.log`. The runtimes resume from their
workdirs, so a job whose config changed only in its budget (a raised
`env_steps`) continues from its checkpoint, and a finished job (the same
fingerprint, or a config that differs only in fields the framework added
since; its output in place, its inputs unchanged) is skipped. A
failed job is recorded with its error; jobs that do not depend on it go
on; the next invocation retries it. Stopping (SIGINT/SIGTERM to
`python -m i2a.sweep`, or `stop`): the child is sent SIGTERM; training
finishes its update and writes a final checkpoint (LearnerLoop's
should_stop), pretraining checkpoints its step, collection and the
evaluations are redone when rerun (their runtimes restart them).

Pretraining and training runs are never continued on changed inputs: a
started run whose dataset or envmodel changed since it started fails with
a message (delete its workdir to run it on the new one). The evaluations
are recomputed instead.

The report (i2a/run/sweep_report.py, `write_report(sweep_dir)`) reads the
workdirs alone: report/report.md and report/report.json (per
configuration, the mean and the 95% Student t interval over seeds of the
final metrics) and learning curves with intervals over seeds
(report/*.png).
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import fnmatch
import hashlib
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from typing import (Any, Callable, Dict, List, Optional, Sequence, TextIO,
                    Tuple)

import ml_collections
import numpy as np

from i2a import io_utils
from i2a.progress import format_duration
from i2a.run import sweep_archive as archiving

STAGES = ("collect", "pretrain", "evaluate_models", "train", "evaluate")
# Recomputed from scratch when their inputs change (the others resume).
DERIVED = ("evaluate_models", "evaluate")
RUN_FIELDS = {
    "collect": ("name", "config", "overrides", "seeds", "policy"),
    "pretrain": ("name", "config", "overrides", "seeds", "data"),
    "train": ("name", "config", "overrides", "seeds", "envmodel"),
    "evaluate_models": ("name", "models", "data", "seeds", "T",
                        "num_windows", "batch_size", "horizon",
                        "rollout_batch", "precision"),
}
# python -m i2a.evaluate_models's defaults.
MODEL_TABLE_DEFAULTS = dict(T=10, num_windows=256, batch_size=16, horizon=12,
                            rollout_batch=32, precision="auto")
EVALUATE_DEFAULTS = dict(episodes=10, greedy=False, seed=0)
UNITS = {"collect": "env steps", "pretrain": "steps", "train": "env steps",
         "evaluate": "episodes", "evaluate_models": "models"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

RECORD = "sweep_run.json"  # a job's state, in its workdir
LOG = "sweep_run.log"  # the job's output, appended across attempts
JOB = "sweep_job.json"  # what the child process runs
RESULT = "sweep_result.json"  # the child's outcome of one attempt
LOCK = "sweep.lock"
SWEEP = "sweep.json"  # the grid's name and every invocation
PLAN = "sweep_plan.json"  # the jobs of the latest invocation, in order
REPORT = "report"
# fit_runs: a run starts only if its expected time, times this, fits.
FIT_MARGIN = 1.15
# With an archive: seconds between snapshots of the running training runs.
ARCHIVE_EVERY_S = 1800.0

# Exit codes of `python -m i2a.sweep`.
EXIT_DONE, EXIT_FAILED, EXIT_STOPPED = 0, 1, 3



# -- Config files and grids ----------------------------------------------------

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config_file(spec: str) -> ml_collections.ConfigDict:
  """`get_config(preset)` of the config file 'PATH[:preset]', found as the
  binaries' --config flags find it (i2a.cli.load_config_file)."""
  from i2a import cli  # pylint: disable=import-outside-toplevel
  return cli.load_config_file(spec)


def load_grid(spec: str) -> ml_collections.ConfigDict:
  """The grid of a grid file 'configs/sweeps/NAME.py[:preset]'."""
  return load_config_file(spec)


def _plain(value: Any) -> Any:
  """ConfigDicts, FieldReferences and tuples -> dicts, values and lists."""
  if isinstance(value, ml_collections.FieldReference):
    return _plain(value.get())
  if isinstance(value, ml_collections.ConfigDict):
    return {k: _plain(v) for k, v in value.items()}
  if isinstance(value, dict):
    return {k: _plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_plain(v) for v in value]
  return value


def _jsonable(value: Any) -> Any:
  return json.loads(json.dumps(_plain(value)))


def _fingerprint(data: Any) -> str:
  text = json.dumps(data, sort_keys=True, separators=(",", ":"))
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_id(stage: str, name: str, seed: int) -> str:
  return f"{stage}/{name}/seed{seed}"


@dataclasses.dataclass
class Job:
  """One run of one seed: what it runs, where, and what it needs first."""
  stage: str
  name: str
  seed: int
  workdir: str
  # The resolved config (collect, pretrain, train) or the parameters
  # (evaluate, evaluate_models) the child runs with.
  config: Dict[str, Any]
  deps: Tuple[str, ...]
  budget: float  # in UNITS[stage]
  config_file: str = ""  # FILE[:preset] in the grid
  overrides: Dict[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def id(self) -> str:
    return run_id(self.stage, self.name, self.seed)

  @property
  def fingerprint(self) -> str:
    return _fingerprint(dict(stage=self.stage, config=self.config))

  @property
  def configuration(self) -> str:
    return f"{self.stage}/{self.name}"


@dataclasses.dataclass
class Plan:
  """The jobs of a grid, in the order they run."""
  name: str
  sweep_dir: str
  jobs: List[Job]
  grid: Dict[str, Any]

  def job(self, job_id: str) -> Job:
    for job in self.jobs:
      if job.id == job_id:
        return job
    raise KeyError(job_id)

  def to_json(self) -> Dict[str, Any]:
    return dict(name=self.name, grid=self.grid, jobs=[
        dict(id=j.id, stage=j.stage, name=j.name, seed=j.seed,
             workdir=os.path.relpath(j.workdir, self.sweep_dir),
             deps=list(j.deps), budget=j.budget, unit=UNITS[j.stage],
             config_file=j.config_file) for j in self.jobs])


def _without_unset(overrides: Dict[str, Any]) -> Dict[str, Any]:
  """`overrides` less every value None, at any depth: a grid field left
  unset (`config_dict.placeholder`) overrides nothing, so the config
  file's value stands and the run is the one made without the field."""
  kept = {}
  for key, value in overrides.items():
    if isinstance(value, dict):
      value = _without_unset(value)
      if not value:
        continue
    if value is not None:
      kept[key] = value
  return kept


def _apply_overrides(config: ml_collections.ConfigDict,
                     overrides: Dict[str, Any], where: str,
                     prefix: str = "") -> None:
  """Sets each (nested) override; a field the config lacks is refused."""
  for key, value in overrides.items():
    path = prefix + key
    if key not in config:
      known = ", ".join(sorted(config.keys()))
      raise ValueError(f"{where}: override {path!r} is not a field of the "
                       f"config (fields here: {known}).")
    if isinstance(value, dict) and isinstance(config[key],
                                              ml_collections.ConfigDict):
      _apply_overrides(config[key], value, where, path + ".")
      continue
    try:
      config[key] = tuple(value) if isinstance(value, list) else value
    except (TypeError, ValueError) as e:
      raise ValueError(f"{where}: override {path}={value!r}: {e}") from e


class _Resolver:
  """References 'stage/name[/seedN]' -> jobs, with clear refusals."""

  def __init__(self, seeds: Dict[Tuple[str, str], Tuple[int, ...]]):
    self._seeds = seeds

  def resolve(self, reference: Any, stage: str, seed: int, where: str) -> str:
    if not isinstance(reference, str) or not reference:
      raise ValueError(f"{where}: a reference must be 'STAGE/NAME' or "
                       f"'STAGE/NAME/seedN', given {reference!r}.")
    parts = reference.strip("/").split("/")
    explicit = None
    if len(parts) == 3 and re.fullmatch(r"seed\d+", parts[2]):
      explicit = int(parts[2][4:])
      parts = parts[:2]
    if len(parts) != 2 or parts[0] != stage:
      raise ValueError(f"{where}: {reference!r} must name a {stage} run: "
                       f"'{stage}/NAME' or '{stage}/NAME/seedN'.")
    key = (stage, parts[1])
    if key not in self._seeds:
      known = sorted(n for s, n in self._seeds if s == stage)
      raise ValueError(f"{where}: {reference!r} names no run of the grid "
                       f"(its {stage} runs: {', '.join(known) or 'none'}).")
    seeds = self._seeds[key]
    if explicit is not None:
      if explicit not in seeds:
        raise ValueError(f"{where}: {reference!r}: {stage}/{parts[1]} has "
                         f"seeds {list(seeds)}.")
      return run_id(stage, parts[1], explicit)
    if seed in seeds:
      return run_id(stage, parts[1], seed)
    if len(seeds) == 1:
      return run_id(stage, parts[1], seeds[0])
    raise ValueError(f"{where}: {reference!r} is ambiguous for seed {seed}: "
                     f"{stage}/{parts[1]} has seeds {list(seeds)}; name one "
                     f"('{stage}/{parts[1]}/seedN').")


def _runs(grid: Dict[str, Any], stage: str) -> List[Dict[str, Any]]:
  runs = grid.get(stage) or []
  if isinstance(runs, dict):
    raise ValueError(f"grid.{stage} must be a tuple of runs (dicts with a "
                     "'name'), given a dict.")
  out, names = [], set()
  for i, run in enumerate(runs):
    if not isinstance(run, dict) or "name" not in run:
      raise ValueError(f"grid.{stage}[{i}] must be a dict with a 'name'.")
    name = run["name"]
    where = f"grid {stage}/{name}"
    if not isinstance(name, str) or not _NAME.match(name):
      raise ValueError(f"{where}: a name is letters, digits, '_', '.' and "
                       "'-' (it names a directory).")
    if name in names:
      raise ValueError(f"{where}: two {stage} runs have this name.")
    names.add(name)
    unknown = sorted(set(run) - set(RUN_FIELDS[stage]))
    if unknown:
      raise ValueError(f"{where}: unknown fields {unknown}; a {stage} run "
                       f"has {', '.join(RUN_FIELDS[stage])}.")
    if stage != "evaluate_models" and not run.get("config"):
      raise ValueError(f"{where}: 'config' (FILE[:preset]) is required.")
    out.append(run)
  return out


def _seeds(run: Dict[str, Any], default: Sequence[int], where: str
           ) -> Tuple[int, ...]:
  seeds = run.get("seeds", default)
  if isinstance(seeds, int):
    seeds = (seeds,)
  seeds = tuple(seeds)
  if not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds) \
      or len(set(seeds)) != len(seeds):
    raise ValueError(f"{where}: seeds must be distinct integers >= 0, "
                     f"given {list(seeds)}.")
  return seeds


def make_plan(grid: ml_collections.ConfigDict, sweep_dir: str) -> Plan:
  """The jobs of `grid` in SWEEP_DIR, in running order.

  Raises ValueError, before anything is written, for an unknown stage or
  field, a reference to a run the grid lacks, an override of a field the
  config file lacks, or a config file that does not load.
  """
  data = _plain(grid)
  if not isinstance(data, dict):
    raise ValueError("a grid is a ConfigDict (get_config(preset)).")
  sweep_dir = os.path.abspath(os.path.expanduser(sweep_dir))
  for key, value in data.items():
    if key not in STAGES and isinstance(value, list) and value and all(
        isinstance(v, dict) and "name" in v for v in value):
      raise ValueError(f"grid.{key} lists runs, but {key!r} is no stage "
                       f"(stages: {', '.join(STAGES)}).")
  default_seeds = data.get("seeds", (0,))
  evaluate = dict(EVALUATE_DEFAULTS)
  unknown = sorted(set(data.get("evaluate") or {}) - set(EVALUATE_DEFAULTS))
  if unknown:
    raise ValueError(f"grid.evaluate: unknown fields {unknown}; it has "
                     f"{', '.join(EVALUATE_DEFAULTS)}.")
  evaluate.update(data.get("evaluate") or {})
  runs = {stage: _runs(data, stage) for stage in STAGES if stage != "evaluate"}
  seeds = {}
  for stage, stage_runs in runs.items():
    for run in stage_runs:
      where = f"grid {stage}/{run['name']}"
      # One dataset unless the run says otherwise.
      seeds[(stage, run["name"])] = _seeds(
          run, (0,) if stage == "collect" else default_seeds, where)
  resolver = _Resolver(seeds)
  jobs: Dict[str, Job] = {}
  order: List[str] = []

  def workdir(stage: str, name: str, seed: int) -> str:
    return os.path.join(sweep_dir, run_id(stage, name, seed))

  def add(job: Job) -> None:
    jobs[job.id] = job
    order.append(job.id)

  for stage in ("collect", "pretrain", "evaluate_models", "train"):
    stage_runs = runs[stage]
    max_seeds = max([len(seeds[(stage, r["name"])]) for r in stage_runs],
                    default=0)
    # Seed-major: every configuration's first seed, then the second...
    for index in range(max_seeds):
      for run in stage_runs:
        run_seeds = seeds[(stage, run["name"])]
        if index >= len(run_seeds):
          continue
        seed = run_seeds[index]
        where = f"grid {stage}/{run['name']} (seed {seed})"
        if stage == "evaluate_models":
          add(_model_table_job(run, seed, where, resolver, sweep_dir,
                               workdir(stage, run["name"], seed)))
        else:
          add(_config_job(stage, run, seed, where, resolver, sweep_dir,
                          workdir(stage, run["name"], seed)))
  episodes = evaluate["episodes"]
  if not isinstance(episodes, int) or episodes < 0:
    raise ValueError(f"grid.evaluate.episodes must be an integer >= 0 (0: "
                     f"no evaluation), given {episodes!r}.")
  if episodes:
    for job_id in [i for i in order if jobs[i].stage == "train"]:
      train = jobs[job_id]
      add(Job("evaluate", train.name, train.seed,
              workdir("evaluate", train.name, train.seed),
              dict(train=train.workdir, episodes=episodes,
                   greedy=bool(evaluate["greedy"]),
                   seed=int(evaluate["seed"])), (train.id,),
              float(episodes)))
  if not order:
    raise ValueError("the grid lists no runs (stages: "
                     f"{', '.join(STAGES)}).")
  return Plan(str(data.get("name") or "sweep"), sweep_dir,
              _dependency_order([jobs[i] for i in order]), data)


def _dependency_order(jobs: Sequence[Job]) -> List[Job]:
  """`jobs` with every job after the jobs it depends on, else in the given
  order (a collect run acting with a train run's policy comes after it).
  Raises ValueError naming the runs of a dependency cycle."""
  by_id = {j.id: j for j in jobs}
  ordered: List[Job] = []
  state: Dict[str, str] = {}  # id -> 'visiting' | 'done'

  def visit(job: Job, path: Tuple[str, ...]) -> None:
    if state.get(job.id) == "done":
      return
    if state.get(job.id) == "visiting":
      cycle = path[path.index(job.id):] + (job.id,)
      raise ValueError("the grid's runs depend on each other in a cycle: "
                       f"{' -> '.join(cycle)}; break it (a run cannot "
                       "depend on its own output).")
    state[job.id] = "visiting"
    for dep in job.deps:
      visit(by_id[dep], path + (job.id,))
    state[job.id] = "done"
    ordered.append(job)

  for job in jobs:
    visit(job, ())
  return ordered


def _config_job(stage: str, run: Dict[str, Any], seed: int, where: str,
                resolver: _Resolver, sweep_dir: str, workdir: str) -> Job:
  try:
    config = load_config_file(run["config"])
  except ValueError as e:
    raise ValueError(f"{where}: {e}") from e
  overrides = _without_unset(run.get("overrides") or {})
  _apply_overrides(config, overrides, where)
  if "seed" in config:
    config.seed = seed
  deps = []
  if stage == "collect" and run.get("policy"):
    dep = resolver.resolve(run["policy"], "train", seed, where + ", policy")
    config.policy = "checkpoint:" + os.path.join(sweep_dir, dep)
    deps.append(dep)
  if stage == "pretrain":
    if not run.get("data"):
      raise ValueError(f"{where}: 'data' (a collect run) is required.")
    dep = resolver.resolve(run["data"], "collect", seed, where + ", data")
    config.data = os.path.join(sweep_dir, dep, "dataset")
    deps.append(dep)
  if stage == "train" and run.get("envmodel"):
    dep = resolver.resolve(run["envmodel"], "pretrain", seed,
                           where + ", envmodel")
    config.envmodel = os.path.join(sweep_dir, dep, "export")
    deps.append(dep)
  budget = {"collect": lambda c: c.train_steps + c.test_steps,
            "pretrain": lambda c: c.train_steps,
            "train": lambda c: c.env_steps}[stage](config)
  return Job(stage, run["name"], seed, workdir, _jsonable(config),
             tuple(deps), float(budget), run["config"],
             _jsonable(overrides))


def _model_table_job(run: Dict[str, Any], seed: int, where: str,
                     resolver: _Resolver, sweep_dir: str,
                     workdir: str) -> Job:
  models = run.get("models") or []
  if isinstance(models, str) or not models:
    raise ValueError(f"{where}: 'models' must list pretrain runs.")
  if not run.get("data"):
    raise ValueError(f"{where}: 'data' (a collect run) is required.")
  deps = [resolver.resolve(m, "pretrain", seed, where + ", models")
          for m in models]
  data = resolver.resolve(run["data"], "collect", seed, where + ", data")
  params = {k: run.get(k, v) for k, v in MODEL_TABLE_DEFAULTS.items()}
  params.update(models=[os.path.join(sweep_dir, d, "export") for d in deps],
                data=os.path.join(sweep_dir, data, "dataset"))
  return Job("evaluate_models", run["name"], seed, workdir, params,
             tuple(deps + [data]), float(len(deps)))


def select(plan: Plan, only: Sequence[str]) -> List[Job]:
  """The jobs matching any pattern of `only` (all without patterns): a
  glob on the run id ('train/a2c/*'), or a substring without glob
  characters ('a2c'). A pattern that matches nothing is refused.

  The patterns are in priority order: the jobs that the first one matches
  come first, then those that only later ones match, each group in the
  plan's order (seed by seed). `run_sweep` starts ready jobs in this
  order, so 'train/b/*,train/c/seed0' finishes b's seeds before it takes
  up c, where the plan's order alone would interleave them."""
  patterns = [p for p in only if p]
  if not patterns:
    return list(plan.jobs)

  def matches(pattern: str, job: Job) -> bool:
    if any(ch in pattern for ch in "*?["):
      return fnmatch.fnmatchcase(job.id, pattern)
    return pattern in job.id

  for pattern in patterns:
    if not any(matches(pattern, j) for j in plan.jobs):
      raise ValueError(f"--only={pattern!r} matches no run of the grid "
                       f"(runs are named like {plan.jobs[0].id!r}).")
  chosen = [j for j in plan.jobs if any(matches(p, j) for p in patterns)]
  return sorted(chosen, key=lambda job: next(  # stable: the plan's order
      i for i, p in enumerate(patterns) if matches(p, job)))


def left_out(plan: Plan, selected: Sequence[Job],
             is_done: Callable[[Job], bool]) -> Dict[str, List[str]]:
  """{id of a run the selection needs but leaves out and that is not
  done: [ids of the selected runs, not done, that wait for it]}, in the
  plan's order. Such runs cannot start in this invocation (e.g.
  --only='pretrain/x/*' in a directory whose dataset was never collected,
  or was not restored: collections are not archived)."""
  chosen = {j.id for j in selected}
  waiting: Dict[str, List[str]] = {}
  for job in selected:
    if is_done(job):
      continue
    for dep in job.deps:
      if dep not in chosen and not is_done(plan.job(dep)):
        waiting.setdefault(dep, []).append(job.id)
  order = {j.id: i for i, j in enumerate(plan.jobs)}
  return dict(sorted(waiting.items(), key=lambda item: order[item[0]]))


# -- Job states ----------------------------------------------------------------

def read_record(workdir: str) -> Optional[Dict[str, Any]]:
  path = os.path.join(workdir, RECORD)
  if not os.path.exists(path):
    return None
  try:
    record = io_utils.read_json(path)
  except (OSError, ValueError):
    return None
  return record if isinstance(record, dict) else None


def _write_record(workdir: str, record: Dict[str, Any]) -> None:
  io_utils.atomic_write_json(os.path.join(workdir, RECORD), record)


def _outcome_files(stage: str, workdir: str, config: Dict[str, Any]
                   ) -> List[str]:
  if stage == "collect":
    return [os.path.join(workdir, "dataset", split, "manifest.json")
            for split in ("train", "test")]
  if stage == "pretrain":
    return [os.path.join(workdir, "pretrain_done.json")]
  if stage == "train":
    return [os.path.join(workdir, "checkpoints", "checkpoint")]
  if stage == "evaluate":
    return [os.path.join(config["train"], "eval", "scores.json")]
  return [os.path.join(workdir, "model_table.json")]


def outcome_signature(job: Job) -> Optional[str]:
  """A hash of what the job produced (None while it has produced nothing):
  the dataset's manifests, the export's completion marker, the newest
  checkpoint's pointer, the evaluation's scores or the model table."""
  digest = hashlib.sha256()
  for path in _outcome_files(job.stage, job.workdir, job.config):
    try:
      with open(path, "rb") as f:
        digest.update(f.read())
    except OSError:
      return None
  return digest.hexdigest()[:16]


def _last(path: str, column: str) -> float:
  from i2a.metrics import read_column  # pylint: disable=import-outside-toplevel
  values = read_column(path, column) if os.path.exists(path) else None
  if values is None or not len(values):
    return 0.0
  finite = values[np.isfinite(values)]
  return float(finite[-1]) if len(finite) else 0.0


def progress_units(job: Job) -> float:
  """How far the job got, in UNITS[stage], from its workdir."""
  if job.stage == "pretrain":
    done = os.path.join(job.workdir, "pretrain_done.json")
    if os.path.exists(done):
      try:
        return float(io_utils.read_json(done)["step"])
      except (OSError, ValueError, KeyError):
        pass
    return _last(os.path.join(job.workdir, "metrics.csv"), "step")
  if job.stage == "train":
    return _last(os.path.join(job.workdir, "metrics.csv"), "env_steps")
  record = read_record(job.workdir)
  if record and record.get("state") == "done" and \
      record.get("fingerprint") == job.fingerprint:
    return job.budget
  return 0.0


def _same_config(job: Job, record: Dict[str, Any]) -> bool:
  """Whether the finished run of `record` is `job`'s run: the same
  fingerprint, or a config that differs only in fields the framework added
  after the run finished (every field the run had is unchanged), so that
  updating the framework in the middle of a sweep keeps its finished runs
  (a run that continues meets the runtime's own check of added fields)."""
  if record.get("fingerprint") == job.fingerprint:
    return True
  old = record.get("config")
  if not isinstance(old, dict) or record.get("stage") != job.stage:
    return False
  old_flat, new_flat = io_utils.flatten(old), io_utils.flatten(job.config)
  return all(k in new_flat and new_flat[k] == v for k, v in old_flat.items())


class Sweep:
  """The jobs of a plan and their states, read from the workdirs."""

  def __init__(self, plan: Plan, parallel: int = 1):
    self.plan = plan
    self.parallel = parallel  # runs at once: the ETA's divisor
    self._by_id = {j.id: j for j in plan.jobs}

  def upstream(self, job: Job) -> Dict[str, Optional[str]]:
    return {d: outcome_signature(self._by_id[d]) for d in job.deps}

  def is_done(self, job: Job) -> bool:
    record = read_record(job.workdir)
    if not record or record.get("state") != "done" or not _same_config(
        job, record):
      return False
    outcome = outcome_signature(job)
    if outcome is None or outcome != record.get("outcome"):
      return False
    if job.stage in DERIVED and record.get("upstream") != self.upstream(job):
      return False
    return True

  def state(self, job: Job, holder: Optional[Dict[str, Any]] = None
            ) -> Tuple[str, str]:
    """(pending | running | done | failed, a detail); `holder`: the
    invocation that holds the sweep's lock now (holder_of), if any."""
    record = read_record(job.workdir)
    if self.is_done(job):
      return "done", f"{format_duration(record.get('seconds', 0.0))} " \
          f"over {record.get('attempts', 1)} attempt(s)"
    if record and record.get("state") == "running" and holder and (
        holder.get("pid"), holder.get("host")) == (record.get("pid"),
                                                   record.get("host")):
      return "running", (f"attempt {record.get('attempts')}, since "
                         f"{record.get('started')}")
    if record and record.get("state") == "failed":
      error = (record.get("error") or "").strip().splitlines() or [""]
      return "failed", (error[0] + (" ..." if len(error) > 1 else "") +
                        f" (attempt "
                        f"{record.get('attempts')}; retried by the next "
                        f"invocation; log: {os.path.join(job.workdir, LOG)})")
    details = []
    if record:
      state = record.get("state")
      if state in ("stopped", "running"):
        details.append("stopped" if state == "stopped" else
                       "interrupted (its invocation ended)")
      elif state == "done" and not _same_config(job, record):
        details.append("its config changed since it finished (e.g. a "
                       "raised budget)")
      elif state == "done":
        details.append("its inputs or outputs changed since it finished")
    waits = [d for d in job.deps if not self.is_done(self._by_id[d])]
    if waits:
      failed = [d for d in waits
                if (read_record(self._by_id[d].workdir) or {}).get("state")
                == "failed"]
      details.append(f"waits for {', '.join(waits)}" +
                     (f" ({', '.join(failed)} failed)" if failed else ""))
    return "pending", "; ".join(details)


# -- Locking -------------------------------------------------------------------

class SweepLock:
  """One invocation at a time runs a sweep directory (an flock)."""

  def __init__(self, sweep_dir: str):
    self.path = os.path.join(sweep_dir, LOCK)
    self._fd: Optional[int] = None

  def __enter__(self) -> "SweepLock":
    os.makedirs(os.path.dirname(self.path), exist_ok=True)
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      os.close(fd)
      holder = holder_of(os.path.dirname(self.path)) or {}
      raise ValueError(
          f"another `python -m i2a.sweep` runs in {os.path.dirname(self.path)}"
          f" (pid {holder.get('pid')} on {holder.get('host')}, since "
          f"{holder.get('started')}): wait for it or stop it (SIGTERM) "
          "first.") from None
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(dict(pid=os.getpid(), host=socket.gethostname(),
                                 started=_now())).encode())
    self._fd = fd
    return self

  def __exit__(self, *exc) -> None:
    if self._fd is not None:
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
      self._fd = None


def holder_of(sweep_dir: str) -> Optional[Dict[str, Any]]:
  """Who holds the sweep's lock (pid, host, started), or None."""
  path = os.path.join(sweep_dir, LOCK)
  if not os.path.exists(path):
    return None
  fd = os.open(path, os.O_RDONLY)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
      with open(path) as f:
        try:
          return json.loads(f.read() or "{}")
        except ValueError:
          return {}
    fcntl.flock(fd, fcntl.LOCK_UN)
    return None
  finally:
    os.close(fd)


def _now() -> str:
  return datetime.datetime.now().isoformat(timespec="seconds")


# -- Listing and progress ------------------------------------------------------

def _running_progress(job: Job, record: Dict[str, Any]
                      ) -> Tuple[float, float]:
  """(units gained, seconds) of `job`'s attempt in progress, where its
  record says it runs in a live sweep process of this host; (0, 0) else
  (no attempt running, or a record left by a sweep that died)."""
  if (record.get("state") != "running" or "progress_at_start" not in record
      or record.get("host") != socket.gethostname()):
    return 0.0, 0.0
  try:
    os.kill(int(record["pid"]), 0)
  except PermissionError:
    pass  # alive, another user's
  except (OSError, KeyError, TypeError, ValueError):
    return 0.0, 0.0
  try:
    started = datetime.datetime.fromisoformat(record["started"])
  except (KeyError, TypeError, ValueError):
    return 0.0, 0.0
  seconds = (datetime.datetime.now() - started).total_seconds()
  units = progress_units(job) - float(record["progress_at_start"])
  return (units, seconds) if units > 0 and seconds > 0 else (0.0, 0.0)


def _rates(plan: Plan) -> Tuple[Dict[str, float], Dict[str, float]]:
  """Measured units/s per configuration and per stage, from the records:
  the finished attempts' and the attempts running now (so a
  configuration's first runs are timed at their own rate while they run,
  not at their stage's, which a faster configuration may have set)."""
  totals: Dict[str, List[float]] = {}
  for job in plan.jobs:
    record = read_record(job.workdir) or {}
    running_units, running_seconds = _running_progress(job, record)
    units = record.get("units", 0.0) + running_units
    seconds = record.get("seconds", 0.0) + running_seconds
    if units > 0 and seconds > 0:
      for key in (job.configuration, job.stage):
        total = totals.setdefault(key, [0.0, 0.0])
        total[0] += units
        total[1] += seconds
  by_config = {k: u / s for k, (u, s) in totals.items() if "/" in k}
  by_stage = {k: u / s for k, (u, s) in totals.items() if "/" not in k}
  return by_config, by_stage


def eta(plan: Plan, jobs: Sequence[Job], sweep: Sweep
        ) -> Tuple[Optional[float], int]:
  """(seconds the jobs not done still need, estimated from the rates this
  sweep measured: the configuration's own, else its stage's; the number
  of jobs no rate covers)."""
  by_config, by_stage = _rates(plan)
  seconds, unknown, left = 0.0, 0, 0
  for job in jobs:
    if sweep.is_done(job):
      continue
    left += 1
    rate = by_config.get(job.configuration) or by_stage.get(job.stage)
    if not rate:
      unknown += 1
      continue
    remaining = max(0.0, job.budget - progress_units(job))
    seconds += remaining / rate
  return (None if left and unknown == left else seconds), unknown


def _progress_line(plan: Plan, jobs: Sequence[Job], sweep: Sweep,
                   current: Optional[Job] = None) -> str:
  done = sum(sweep.is_done(j) for j in jobs)
  failed = sum((read_record(j.workdir) or {}).get("state") == "failed"
               for j in jobs if not sweep.is_done(j))
  line = f"[sweep {plan.name}] {done}/{len(jobs)} runs done"
  if failed:
    line += f", {failed} failed"
  if current is not None:
    fraction = min(1.0, progress_units(current) / max(current.budget, 1e-9))
    line += f" | now {current.id} ({100 * fraction:.0f}%)"
  seconds, unknown = eta(plan, jobs, sweep)
  if seconds is not None:
    line += f" | ETA {format_duration(seconds / sweep.parallel)}"
    if sweep.parallel > 1:
      line += f" ({sweep.parallel} runs at once)"
    if unknown:
      line += f" + {unknown} run(s) without a measured rate"
  elif done < len(jobs):
    line += " | ETA unknown until a run of each kind is measured"
  return line


def list_runs(plan: Plan, only: Sequence[str] = (),
              archive: Optional[str] = None, parallel: int = 1) -> str:
  """The runs, their states and progress, without running anything; with
  `archive`, a run without a record here that the archive holds says so
  (the next invocation that runs restores it); the ETA for `parallel`
  runs at once."""
  jobs = select(plan, only)
  sweep = Sweep(plan, parallel=parallel)
  holder = holder_of(plan.sweep_dir)
  lines = []
  counts: Dict[str, int] = {}
  for job in jobs:
    state, detail = sweep.state(job, holder)
    archived = (archiving.archived_state(archive, job)
                if archive and read_record(job.workdir) is None else None)
    if archived is not None:
      archived = dict(running="in progress, with its newest checkpoint",
                      stopped="stopped, with its newest checkpoint").get(
                          archived, archived)
      detail = "; ".join(filter(None, [
          f"archived {archived} (restored by the next invocation that "
          "runs)", detail]))
    counts[state] = counts.get(state, 0) + 1
    fraction = min(1.0, progress_units(job) / max(job.budget, 1e-9))
    lines.append(f"{state:<8} {job.id:<44} {100 * fraction:5.1f}% of "
                 f"{job.budget:,.0f} {UNITS[job.stage]}"
                 + (f"  {detail}" if detail else ""))
  head = (f"sweep {plan.name} in {plan.sweep_dir}: " +
          ", ".join(f"{counts.get(s, 0)} {s}"
                    for s in ("done", "running", "failed", "pending")) +
          f" of {len(jobs)} runs")
  if holder is not None:
    head += (f" (an invocation runs now: pid {holder.get('pid')} on "
             f"{holder.get('host')})")
  return "\n".join([head, _progress_line(plan, jobs, sweep)] + lines)


# -- Running -------------------------------------------------------------------

def _check_identity(sweep_dir: str, plan: Plan) -> Dict[str, Any]:
  path = os.path.join(sweep_dir, SWEEP)
  record = io_utils.read_json(path) if os.path.exists(path) else dict(
      name=plan.name, invocations=[])
  if record.get("name") != plan.name:
    raise ValueError(f"{sweep_dir} holds the sweep {record.get('name')!r}, "
                     f"not {plan.name!r}: use another --workdir.")
  return record


def _child_env() -> Dict[str, str]:
  from i2a.run import launch as launching  # pylint: disable=import-outside-toplevel
  env = dict(os.environ)
  env[launching.LAUNCHER_PID_ENV] = str(os.getpid())
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  env["PYTHONUNBUFFERED"] = "1"
  env["PYTHONPATH"] = os.pathsep.join(
      [_REPO_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                      if p])
  return env


def _signal_name(number: int) -> str:
  try:
    return signal.Signals(number).name
  except ValueError:
    return str(number)


def _tail(path: str, lines: int = 5) -> str:
  try:
    with open(path, "rb") as f:
      f.seek(max(0, os.path.getsize(path) - 8192))
      text = f.read().decode("utf-8", "replace")
  except OSError:
    return ""
  return "\n".join(text.strip().splitlines()[-lines:])


@dataclasses.dataclass
class Control:
  """Requests to a running sweep: `stop` (the current run checkpoints and
  the sweep ends), `hurry` (the current run ends now)."""
  stop: threading.Event = dataclasses.field(default_factory=threading.Event)
  hurry: threading.Event = dataclasses.field(default_factory=threading.Event)


def stop_on_signals(control: Control) -> None:
  """The first SIGINT/SIGTERM asks the current run to checkpoint and the
  sweep to end; another one a second later ends the run at once."""
  first = []

  def handler(signum, frame):
    del frame
    now = time.monotonic()
    if first and now - first[0] >= 1.0:
      control.hurry.set()
      print("second signal: ending the current run now", flush=True)
      return
    if not first:
      first.append(now)
      print(f"signal {signum}: the current run checkpoints, then the sweep "
            "stops (rerun to continue)", flush=True)
    control.stop.set()

  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, handler)


def _run_job(job: Job, sweep: Sweep, control: Control, jobs: Sequence[Job],
             stream: TextIO, progress_every_s: float,
             deadline: Optional[float], python: str) -> str:
  """Runs one attempt of `job` in a child process; returns its state
  (done, stopped or failed) after recording it."""
  from i2a.run import launch as launching  # pylint: disable=import-outside-toplevel
  plan = sweep.plan
  if archiving.restored(job.workdir) is not None:
    how = archiving.prepare_to_run(job.workdir)
    print(f"[sweep {plan.name}] {job.id} was restored from an archive and "
          + ("resumes from its archived checkpoint" if how == "resumes" else
             "must run again without its checkpoints: it starts over"),
          file=stream, flush=True)
  os.makedirs(job.workdir, exist_ok=True)
  record = read_record(job.workdir) or {}
  upstream = sweep.upstream(job)
  record.update(
      id=job.id, stage=job.stage, name=job.name, seed=job.seed,
      config_file=job.config_file, overrides=job.overrides,
      config=job.config,
      fingerprint=job.fingerprint, budget=job.budget, unit=UNITS[job.stage],
      deps=list(job.deps))
  if (job.stage not in DERIVED and record.get("upstream") and
      record["upstream"] != upstream and
      os.path.exists(os.path.join(job.workdir, "config.json"))):
    changed = sorted(d for d in upstream
                     if record["upstream"].get(d) != upstream[d])
    record.update(state="failed", attempts=record.get("attempts", 0) + 1,
                  error=(f"{', '.join(changed)} changed since this run "
                         "started from it; continuing would mix two "
                         f"experiments: delete {job.workdir} to run it "
                         "again on the new one."), finished=_now())
    _write_record(job.workdir, record)
    print(f"[sweep {plan.name}] {job.id} failed: {record['error']}",
          file=stream, flush=True)
    return "failed"
  before = progress_units(job)
  record.update(state="running", attempts=record.get("attempts", 0) + 1,
                upstream=upstream, started=_now(), pid=os.getpid(),
                host=socket.gethostname(), error=None,
                progress_at_start=before)
  _write_record(job.workdir, record)
  io_utils.atomic_write_json(os.path.join(job.workdir, JOB), dict(
      id=job.id, stage=job.stage, workdir=job.workdir, config=job.config))
  result_path = os.path.join(job.workdir, RESULT)
  if os.path.exists(result_path):
    os.remove(result_path)
  log_path = os.path.join(job.workdir, LOG)
  # pylint: disable-next=protected-access  (i2a.launch's log echo)
  echo = launching._LogEcho(log_path, job.id, stream)
  print(_progress_line(plan, jobs, sweep, job) +
        f" | attempt {record['attempts']}, log {log_path}", file=stream,
        flush=True)
  started = time.monotonic()
  with open(log_path, "ab") as log:
    log.write(f"=== {_now()} attempt {record['attempts']} of {job.id} "
              f"===\n".encode())
    log.flush()
    child = subprocess.Popen(
        [python, "-m", "i2a.run.sweep", os.path.join(job.workdir, JOB)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        env=_child_env(), start_new_session=True)
  stop_sent = hurry_sent = None
  last_line = time.monotonic()
  while True:
    try:
      code = child.wait(timeout=0.5)
      break
    except subprocess.TimeoutExpired:
      pass
    echo.poll()
    now = time.monotonic()
    if deadline is not None and now >= deadline and not control.stop.is_set():
      print(f"[sweep {plan.name}] the time limit is reached: stopping",
            file=stream, flush=True)
      control.stop.set()
    if control.stop.is_set() and stop_sent is None:
      child.send_signal(signal.SIGTERM)  # it checkpoints and ends
      stop_sent = now
    if control.hurry.is_set() and hurry_sent is None and stop_sent is not None \
        and now - stop_sent > 1.0:
      child.send_signal(signal.SIGTERM)  # a second one: it ends now
      hurry_sent = now
    if hurry_sent is not None and now - hurry_sent > 30.0:
      child.kill()
    if now - last_line >= progress_every_s:
      print(_progress_line(plan, jobs, sweep, job), file=stream, flush=True)
      last_line = now
  echo.poll()
  elapsed = time.monotonic() - started
  result = None
  if os.path.exists(result_path):
    try:
      result = io_utils.read_json(result_path)
    except (OSError, ValueError):
      result = None
  if result is None:
    how = (f"killed by signal {_signal_name(-code)}" if code < 0
           else f"exited with code {code}")
    result = dict(status="stopped" if stop_sent is not None else "failed",
                  error=(f"the run's process {how} without a result"
                         + (" (out of memory?)" if code == -9 else "")
                         + f"; its last output:\n{_tail(log_path)}"))
  if job.stage in ("pretrain", "train"):  # measured from the workdir
    gained = max(0.0, progress_units(job) - before)
  else:  # all or nothing
    gained = job.budget if result["status"] == "done" else 0.0
  record = read_record(job.workdir) or record
  record.update(
      state=result["status"], finished=_now(),
      seconds=record.get("seconds", 0.0) + elapsed,
      units=record.get("units", 0.0) + gained,
      error=result.get("error"), summary=result.get("summary"))
  if result["status"] == "done":
    record["outcome"] = outcome_signature(job)
  _write_record(job.workdir, record)
  line = (f"[sweep {plan.name}] {job.id} {result['status']} after "
          f"{format_duration(elapsed)}")
  if result["status"] == "failed":
    line += f": {result.get('error')}"
  print(line, file=stream, flush=True)
  return result["status"]


def _ready(sweep: Sweep, jobs: Sequence[Job], attempted: set) -> List[Job]:
  """The jobs that can start: their dependencies done, not done, not tried
  (nor running) in this invocation. The evaluations first, then the runs
  an earlier invocation started (they resume from their checkpoints),
  then the rest, each group in the order of `jobs` (`select`'s: --only's
  patterns first, then the plan's): a sweep stopped and continued
  finishes what it began before it begins anything new."""
  ready = [j for j in jobs if j.id not in attempted and not sweep.is_done(j)
           and all(sweep.is_done(sweep.plan.job(d)) for d in j.deps)]

  def rank(job: Job) -> int:
    if job.stage in DERIVED:
      return 0
    return 1 if progress_units(job) > 0 else 2

  return sorted(ready, key=rank)  # stable: the order of `jobs` within a rank


def expected_seconds(job: Job, rates: Tuple[Dict[str, float],
                                            Dict[str, float]]
                     ) -> Optional[float]:
  """The seconds `job` still needs at the rate this sweep measured for its
  configuration (else its stage); None where nothing is measured."""
  by_config, by_stage = rates
  rate = by_config.get(job.configuration) or by_stage.get(job.stage)
  if not rate:
    return None
  return max(0.0, job.budget - progress_units(job)) / rate


def _next_job(sweep: Sweep, jobs: Sequence[Job], attempted: set,
              seconds_left: Optional[float] = None
              ) -> Tuple[Optional[Job], List[float]]:
  """(The next job to run, the expected seconds of each ready job passed
  over for time).

  With `seconds_left` (the fitting of `run_sweep(fit_runs=True)`), a job
  whose expected time, with FIT_MARGIN, exceeds it is passed over; a job
  whose time nothing measured yet is started (it may be stopped at the
  limit, and resumes later).
  """
  ready = _ready(sweep, jobs, attempted)
  if seconds_left is None:
    return (ready[0] if ready else None), []
  rates = _rates(sweep.plan)
  passed: List[float] = []
  for job in ready:
    seconds = expected_seconds(job, rates)
    if seconds is None or seconds * FIT_MARGIN <= seconds_left:
      return job, passed
    passed.append(seconds)
  return None, passed


def run_sweep(grid: ml_collections.ConfigDict, sweep_dir: str,
              only: Sequence[str] = (), control: Optional[Control] = None,
              stop_after_s: Optional[float] = None,
              progress_every_s: float = 300.0,
              stream: Optional[TextIO] = None,
              python: str = sys.executable,
              archive: Optional[str] = None, jobs: int = 1,
              fit_runs: bool = False,
              archive_every_s: Optional[float] = ARCHIVE_EVERY_S
              ) -> Dict[str, Any]:
  """Runs the jobs of `grid` (those matching `only`) that are not done.

  With `archive` (sweep_archive.py): the runs archived there whose
  workdirs are missing are restored first, and every finished run is
  copied there (at the start and after each run), the report and the
  sweep's history of invocations too (merged into this directory's first);
  every `archive_every_s` (None or 0: never), the training runs in
  progress with their newest checkpoints, so a machine lost without a
  stop loses no more than that.
  `jobs`: how many runs run at once (each in its own process; a run
  starts when its dependencies are done). `fit_runs` (with
  `stop_after_s`): a run starts only if the time it is expected to take
  (its configuration's measured rate, else its stage's, times
  FIT_MARGIN) fits in the time left; runs nothing has measured start
  anyway; when no ready run fits, the sweep stops. For machines that do
  not outlive the limit: nothing is left half-done.

  Returns {ran: [ids], done, failed, pending: [ids of the selection],
  stopped: bool, report: {markdown, json, ...}, restored: [ids]}. The
  report is written at the end, also when stopped.
  """
  stream = stream or sys.stdout
  control = control or Control()
  if jobs < 1:
    raise ValueError(f"jobs must be at least 1 (runs at once); got {jobs}.")
  if archive_every_s is not None and archive_every_s < 0:
    raise ValueError("archive_every_s is the time between snapshots of the "
                     "running training runs (0: none); got "
                     f"{archive_every_s}.")
  if fit_runs and not stop_after_s:
    raise ValueError("fit_runs starts only the runs that finish before the "
                     "time limit: give the limit too (--stop_after).")
  plan = make_plan(grid, sweep_dir)  # refuses a wrong grid up front
  selected = select(plan, only)
  sweep_dir = io_utils.ensure_writable_dir(plan.sweep_dir, "sweep directory")
  started = time.monotonic()
  deadline = started + stop_after_s if stop_after_s else None
  ran: List[str] = []
  with SweepLock(sweep_dir):
    record = _check_identity(sweep_dir, plan)
    io_utils.atomic_write_json(os.path.join(sweep_dir, PLAN), plan.to_json())
    if archive:  # the history of a sweep directory lost or made elsewhere
      archiving.merge_history(record, archive)
    invocation = dict(started=_now(), host=socket.gethostname(),
                      only=list(only), ran=ran)
    record["invocations"].append(invocation)
    io_utils.atomic_write_json(os.path.join(sweep_dir, SWEEP), record)
    if archive:
      archiving.save_history(record, archive)
    sweep = Sweep(plan, parallel=jobs)
    restored: List[str] = []
    if archive:
      restored = archiving.restore(plan, archive)
      if restored:
        print(f"[sweep {plan.name}] {len(restored)} run(s) restored from "
              f"the archive {archive}", file=stream, flush=True)
      _sync_archive(plan, sweep, archive, stream)
    attempted: set = set()
    skipped = [j.id for j in selected if sweep.is_done(j)]
    if skipped:
      print(f"[sweep {plan.name}] {len(skipped)} of {len(selected)} runs "
            "are done already: skipped", file=stream, flush=True)
    missing = left_out(plan, selected, sweep.is_done)
    if missing:
      waiting = {i for ids in missing.values() for i in ids}
      waits = [j.id for j in selected if j.id in waiting]
      patterns = ",".join([p for p in only if p] + list(missing))
      print(f"[sweep {plan.name}] {len(waits)} selected run(s) ("
            f"{', '.join(waits[:4])}{' ...' if len(waits) > 4 else ''}) "
            "wait for runs that --only leaves out and that are not done: "
            f"{', '.join(missing)}. They cannot start in this invocation; "
            f"add them to --only (--only={patterns}).", file=stream,
            flush=True)
    # Each running job's thread waits on its child and puts (id, state).
    running: Dict[str, threading.Thread] = {}
    finished: "queue.Queue[Tuple[str, str]]" = queue.Queue()
    snapshot_at = (time.monotonic() + archive_every_s
                   if archive and archive_every_s else None)

    def run(job: Job) -> None:
      state = "failed"
      try:
        state = _run_job(job, sweep, control, selected, stream,
                         progress_every_s, deadline, python)
      finally:
        finished.put((job.id, state))

    try:
      while True:
        if (deadline is not None and time.monotonic() >= deadline and
            not control.stop.is_set()):
          print(f"[sweep {plan.name}] the time limit is reached: stopping",
                file=stream, flush=True)
          control.stop.set()
        while not control.stop.is_set() and len(running) < jobs:
          seconds_left = (deadline - time.monotonic()
                          if fit_runs and deadline is not None else None)
          job, passed = _next_job(sweep, selected,
                                  attempted | set(running), seconds_left)
          if job is None:
            if passed and not running:
              print(f"[sweep {plan.name}] {len(passed)} ready run(s) would "
                    f"not finish in the {format_duration(seconds_left)} "
                    f"left (the shortest expected: "
                    f"{format_duration(min(passed))}): stopping",
                    file=stream, flush=True)
              control.stop.set()
            break
          attempted.add(job.id)
          ran.append(job.id)
          running[job.id] = threading.Thread(
              target=run, args=(job,), name=f"sweep {job.id}", daemon=True)
          running[job.id].start()
        if not running:
          break
        try:
          job_id, state = finished.get(
              timeout=None if snapshot_at is None else
              max(0.0, snapshot_at - time.monotonic()))
        except queue.Empty:  # the runs in progress, with their checkpoints
          _sync_archive(plan, sweep, archive, stream, running=set(running))
          snapshot_at = time.monotonic() + archive_every_s
          continue
        running.pop(job_id).join()
        if archive:
          _sync_archive(plan, sweep, archive, stream)
        if state == "stopped":
          control.stop.set()
    finally:
      for thread in running.values():  # an exception: the runs stop
        control.stop.set()
        thread.join()
      invocation.update(seconds=time.monotonic() - started,
                        stopped=control.stop.is_set())
      io_utils.atomic_write_json(os.path.join(sweep_dir, SWEEP), record)
      if archive:
        archiving.save_history(record, archive)
  # sweep_report reads this module's layout: imported here, not above.
  from i2a.run import sweep_report as reporting  # pylint: disable=import-outside-toplevel
  report = reporting.write_report(sweep_dir)
  if archive:
    archiving.copy_report(os.path.dirname(report["markdown"]), archive)
  done = [j.id for j in selected if sweep.is_done(j)]
  failed = [j.id for j in selected if j.id not in done and
            (read_record(j.workdir) or {}).get("state") == "failed"]
  pending = [j.id for j in selected if j.id not in done and
             j.id not in failed]
  print(_progress_line(plan, selected, sweep), file=stream, flush=True)
  if pending and not control.stop.is_set():
    blocked = [i for i in pending if not all(
        sweep.is_done(plan.job(d)) for d in plan.job(i).deps)]
    if blocked:
      print(f"[sweep {plan.name}] {len(blocked)} run(s) wait for runs that "
            f"failed or are not selected: {', '.join(blocked[:8])}"
            + (" ..." if len(blocked) > 8 else ""), file=stream, flush=True)
  print(f"[sweep {plan.name}] report: {report['markdown']}", file=stream,
        flush=True)
  return dict(ran=ran, done=done, failed=failed, pending=pending,
              stopped=control.stop.is_set(), report=report,
              restored=restored)


def _sync_archive(plan: Plan, sweep: Sweep, archive: str,
                  stream: TextIO, running: Sequence[str] = ()) -> None:
  changed, copied = archiving.sync(plan, sweep.is_done, archive, running)
  if changed:
    snapshots = [i for i in changed if i in running]
    print(f"[sweep {plan.name}] archived {len(changed)} run(s) in {archive} "
          f"({copied / 1e6:.1f} MB copied"
          + (f"; in progress: {', '.join(snapshots)}" if snapshots else "")
          + ")", file=stream, flush=True)


# -- The child process ---------------------------------------------------------

def _install_stop_handler(stop: threading.Event, interrupt: bool) -> None:
  """SIGINT/SIGTERM set `stop`; with `interrupt` (runtimes without a stop
  of their own), or at a second signal, KeyboardInterrupt is raised."""

  def handler(signum, frame):
    del signum, frame
    again = stop.is_set()
    stop.set()
    if interrupt or again:
      raise KeyboardInterrupt

  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, handler)


def _run_collect(config: ml_collections.ConfigDict, workdir: str,
                 stop: threading.Event) -> Tuple[str, Dict[str, Any]]:
  del stop  # an interrupted split is collected again (its runtime's rule)
  from i2a.run import collect as collection  # pylint: disable=import-outside-toplevel
  manifests = collection.run(config, workdir)
  return "done", {split: dict(steps=m.get("steps"), episodes=m.get("episodes"))
                  for split, m in manifests.items()}


def _run_pretrain(config: ml_collections.ConfigDict, workdir: str,
                  stop: threading.Event) -> Tuple[str, Dict[str, Any]]:
  """Pretrains; a stop request checkpoints the step reached and ends (the
  next invocation resumes there)."""
  from i2a.run import pretrain as pretraining  # pylint: disable=import-outside-toplevel
  pretrainer = pretraining.Pretrainer(config, workdir)
  held_out = pretrainer.train(should_stop=stop.is_set)
  if held_out is None:
    return "stopped", dict(step=int(pretrainer.step.numpy()))
  return "done", dict(held_out=held_out)


def _run_train(config: ml_collections.ConfigDict, workdir: str,
               stop: threading.Event) -> Tuple[str, Dict[str, Any]]:
  from i2a.run import train as training  # pylint: disable=import-outside-toplevel
  trainer = training.Trainer(config, workdir)
  try:
    summary = trainer.loop.train(should_stop=stop.is_set)
  finally:
    trainer.close()
  status = "done" if summary["env_steps"] >= config.env_steps else "stopped"
  return status, {k: summary[k] for k in ("learner_steps", "env_steps",
                                          "episodes", "recent_return",
                                          "env_steps_per_s")}


def _run_evaluate(params: Dict[str, Any], workdir: str,
                  stop: threading.Event) -> Tuple[str, Dict[str, Any]]:
  del workdir, stop
  from i2a.run import evaluate as evaluation  # pylint: disable=import-outside-toplevel
  scores = evaluation.evaluate(params["train"], params["episodes"],
                               params["greedy"], params["seed"])
  return "done", {k: scores[k] for k in ("mean", "std", "episodes",
                                         "checkpoint_step", "env_steps")}


def _run_evaluate_models(params: Dict[str, Any], workdir: str,
                         stop: threading.Event
                         ) -> Tuple[str, Dict[str, Any]]:
  del stop
  # pylint: disable=import-outside-toplevel
  from envmodels import precision
  from i2a.run import evaluate_models as model_evaluation
  precision.set_threads(precision.THREADS_AUTO)  # as the binary's default
  precision.set_precision(params["precision"])
  rows = model_evaluation.evaluate(
      params["models"], params["data"], T=params["T"],
      num_windows=params["num_windows"], batch_size=params["batch_size"],
      horizon=params["horizon"], rollout_batch=params["rollout_batch"])
  model_evaluation.write_report(rows, workdir, params["horizon"],
                                params["rollout_batch"], params["data"])
  return "done", dict(models=len(rows))


_RUNNERS = {"collect": _run_collect, "pretrain": _run_pretrain,
            "train": _run_train, "evaluate": _run_evaluate,
            "evaluate_models": _run_evaluate_models}


def child_main(job_file: str) -> None:
  """Runs one job in this process (`python -m i2a.run.sweep JOB_FILE`),
  writes its result next to the job file and ends the process (status 1
  when the run failed)."""
  from i2a import cli  # pylint: disable=import-outside-toplevel
  from i2a.run import launch as launching  # pylint: disable=import-outside-toplevel
  job = io_utils.read_json(job_file)
  launching.die_with_launcher()
  cli.setup_devices()  # memory growth, as every binary's process
  stop = threading.Event()
  _install_stop_handler(stop, interrupt=job["stage"] not in ("train",
                                                              "pretrain"))
  result: Dict[str, Any] = dict(id=job["id"])
  print(f"{job['id']}: pid {os.getpid()}, workdir {job['workdir']}",
        flush=True)
  try:
    config = job["config"]
    if job["stage"] in ("collect", "pretrain", "train"):
      config = ml_collections.ConfigDict(config)
    status, summary = _RUNNERS[job["stage"]](config, job["workdir"], stop)
    result.update(status=status, summary=summary)
  except KeyboardInterrupt:
    result.update(status="stopped")
  except BaseException as e:  # pylint: disable=broad-except  (recorded)
    traceback.print_exc()
    message = str(e).strip() or repr(e)
    result.update(status="failed", error=f"{type(e).__name__}: {message}")
  print(f"{job['id']}: {result['status']}", flush=True)
  io_utils.atomic_write_json(os.path.join(os.path.dirname(job_file), RESULT),
                             result)
  sys.stdout.flush()
  sys.stderr.flush()
  # Background threads of the runtimes (data feeders, Reverb) must not keep
  # the process: the result is on disk.
  # pylint: disable-next=protected-access
  os._exit(0 if result["status"] != "failed" else 1)


def parse_duration(text: str) -> float:
  """'2h50m', '170m', '45s' or '10200' -> seconds."""
  text = text.strip()
  if re.fullmatch(r"\d+(\.\d+)?", text):
    return float(text)
  match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
  if not text or match is None:
    raise ValueError(f"a duration is like 2h50m, 170m, 45s or 10200 "
                     f"(seconds), given {text!r}.")
  hours, minutes, seconds = (int(g or 0) for g in match.groups())
  return hours * 3600.0 + minutes * 60.0 + seconds


if __name__ == "__main__":
  if len(sys.argv) != 2:
    sys.exit("usage: python -m i2a.run.sweep JOB_FILE (run by python -m "
             "i2a.sweep)")
  child_main(sys.argv[1])
