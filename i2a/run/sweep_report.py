"""A sweep's report, from its workdirs alone: the results table (markdown
and JSON) and the learning curves with intervals over seeds.

  i2a/run/sweep.py (the runs' records, sweep_run.json, and their outputs)
      -> collect_results(sweep_dir)   per configuration, every seed's final
                                      metrics and their mean with a 95%
                                      Student t interval (t_interval); each
                                      agent configuration against the first
                                      (agent_comparisons: the difference of
                                      the means, welch_interval)
      -> write_report(sweep_dir)      SWEEP_DIR/report/report.md,
                                      report.json, agents_learning_curves.png,
                                      agents_evaluation_curves.png,
                                      models_held_out.png (band_plot)

`python -m i2a.sweep` writes it at the end of every invocation (a stopped
one too), and `--report` alone rewrites it; i2a/run/sweep_combine.py
pools the seeds of several sweep directories through the same table
(`summarise`, `markdown`), `--compare=A,B` prints one pair
(`compare`), and benchmarks/claim2_summary.py draws rows of several
reports (`agents_of`, `seed_values`). The statistics:
i2a/run/statistics.py. The report reads only files (no grid needed).
Layout and columns: docs/experiments.md, "The report".
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from i2a import io_utils
from i2a.run import sweep as sweeping
from i2a.run.statistics import Difference, Interval, t_interval, welch_interval

# The final training return and the late evaluation return: the last 10%
# of a run's env steps.
LAST_FRACTION = 0.1
CURVE_POINTS = 200
# The envmodel kinds with a posterior over a latent: their `kl` is the
# posterior's to the prior (the dSSM-DET logs a zero one).
LATENT_KINDS = ("vae", "dssm_vae", "sssm")
# What the report reads from a seed's `evaluate_models` row: values, and
# per-step series taken T model steps ahead (their last entry).
TABLE_VALUES = ("relative_rollout_time", "improvement_over_vae")
TABLE_SERIES = ("action_changed_pixels", "open_loop_mse",
                "copy_last_frame_mse")


# The agents' per-seed values compared across configurations.
COMPARED = (("evaluation_return", "evaluation return"),
            ("late_evaluation_return",
             f"evaluation return (last {LAST_FRACTION:.0%})"),
            ("final_training_return",
             f"training return (last {LAST_FRACTION:.0%})"))


def seed_values(agent: Dict[str, Any], key: str) -> List[float]:
  """An agent configuration's value `key` (one of COMPARED) per finished
  seed that has it, in the order of its seeds."""
  return [e[key] for e in agent.get("seeds", [])
          if e.get("state") == "done" and e.get(key) is not None]


def agent_comparisons(agents: Sequence[Dict[str, Any]]
                      ) -> List[Dict[str, Any]]:
  """Every configuration against the first (the grids list the model-free
  baseline first): per value of COMPARED that both have for two or more
  seeds, the difference of the means and its 95% Welch interval."""
  if len(agents) < 2:
    return []
  reference, out = agents[0], []
  for agent in agents[1:]:
    for key, _ in COMPARED:
      mine, theirs = seed_values(agent, key), seed_values(reference, key)
      if len(mine) < 2 or len(theirs) < 2:
        continue
      difference = welch_interval(mine, theirs)
      out.append(dict(name=agent["name"], reference=reference["name"],
                      value=key, separated=difference.separated,
                      **dataclasses.asdict(difference)))
  return out

# -- The report ----------------------------------------------------------------

def _records(sweep_dir: str) -> List[Tuple[str, Dict[str, Any]]]:
  """(workdir, record) of every job in the sweep directory."""
  found = []
  for stage in sweeping.STAGES:
    stage_dir = os.path.join(sweep_dir, stage)
    if not os.path.isdir(stage_dir):
      continue
    for name in sorted(os.listdir(stage_dir)):
      name_dir = os.path.join(stage_dir, name)
      if not os.path.isdir(name_dir):
        continue
      for seed_dir in sorted(os.listdir(name_dir)):
        workdir = os.path.join(name_dir, seed_dir)
        record = sweeping.read_record(workdir)
        if record is not None and record.get("stage") == stage:
          found.append((workdir, record))
  return found


def _csv_curve(path: str, x_column: str, y_column: str
               ) -> Optional[Tuple[np.ndarray, np.ndarray]]:
  from i2a.metrics import read_column  # pylint: disable=import-outside-toplevel
  if not os.path.exists(path):
    return None
  x, y = read_column(path, x_column), read_column(path, y_column)
  if x is None or y is None:
    return None
  keep = np.isfinite(x) & np.isfinite(y)
  if not keep.any():
    return None
  return x[keep], y[keep]


def _final_return(metrics: str) -> Optional[Tuple[float, Optional[float]]]:
  """(env steps trained, the mean episode return logged over the last
  LAST_FRACTION of them; None when no episode ended there)."""
  from i2a.metrics import read_column  # pylint: disable=import-outside-toplevel
  if not os.path.exists(metrics):
    return None
  steps = read_column(metrics, "env_steps")
  returns = read_column(metrics, "episode_return")
  if steps is None or returns is None or not len(steps):
    return None
  last = returns[(steps >= (1.0 - LAST_FRACTION) * steps[-1]) &
                 np.isfinite(returns)]
  return float(steps[-1]), (float(np.mean(last)) if len(last) else None)


def _late_evaluation(eval_csv: str, env_steps: float
                     ) -> Optional[Tuple[float, int, int]]:
  """(mean return, evaluations, episodes) of the evaluations made during
  training (eval.csv, `config.eval_every`) in the last LAST_FRACTION of
  the run's `env_steps`, each weighted by its episodes: one final
  checkpoint's return swings from one checkpoint to the next, the mean
  over the last few is steadier. None without such an evaluation."""
  from i2a.metrics import read_column  # pylint: disable=import-outside-toplevel
  if not os.path.exists(eval_csv):
    return None
  steps = read_column(eval_csv, "env_steps")
  returns = read_column(eval_csv, "return_mean")
  if steps is None or returns is None:
    return None
  episodes = read_column(eval_csv, "episodes")
  if episodes is None:
    episodes = np.ones_like(returns)
  late = ((steps >= (1.0 - LAST_FRACTION) * env_steps) & np.isfinite(returns)
          & np.isfinite(episodes) & (episodes > 0))
  if not late.any():
    return None
  weights = episodes[late]
  return (float(np.sum(returns[late] * weights) / np.sum(weights)),
          int(late.sum()), int(np.sum(weights)))


def _latest_checkpoint(train_dir: str) -> Optional[str]:
  path = os.path.join(train_dir, "checkpoints", "checkpoint")
  try:
    with open(path) as f:
      match = re.search(r'^model_checkpoint_path:\s*"([^"]+)"', f.read(),
                        re.MULTILINE)
  except OSError:
    return None
  return os.path.basename(match.group(1)) if match else None


def summarise(values: Sequence[float]) -> Optional[Dict[str, Any]]:
  if not values:
    return None
  return dataclasses.asdict(t_interval(values))


def _fmt(summary: Optional[Dict[str, Any]], spec: str = ".2f") -> str:
  if summary is None:
    return "-"
  return Interval(**summary).format(spec)


def _band(curves: Sequence[Tuple[np.ndarray, np.ndarray]],
          points: int = CURVE_POINTS) -> Optional[Dict[str, np.ndarray]]:
  """Curves interpolated on a common grid of x; at each x the mean and
  t interval over the curves that reach it."""
  curves = [(x, y) for x, y in curves if len(x)]
  if not curves:
    return None
  low_x = min(float(x[0]) for x, _ in curves)
  high_x = max(float(x[-1]) for x, _ in curves)
  grid = np.linspace(low_x, high_x, points) if high_x > low_x else \
      np.array([low_x])
  mean, low, high, count = [], [], [], []
  for value in grid:
    ys = [float(np.interp(value, x, y)) for x, y in curves
          if x[0] <= value <= x[-1]]
    if not ys:
      for values in (mean, low, high):
        values.append(np.nan)
      count.append(0)
      continue
    interval = t_interval(ys)
    mean.append(interval.mean)
    low.append(interval.low if interval.low is not None else interval.mean)
    high.append(interval.high if interval.high is not None else
                interval.mean)
    count.append(interval.n)
  return dict(x=grid, mean=np.array(mean), low=np.array(low),
              high=np.array(high), n=np.array(count))


def band_plot(path: str, curves: Dict[str, Sequence[Tuple[np.ndarray,
                                                           np.ndarray]]],
              xlabel: str, ylabel: str, title: str) -> Optional[str]:
  """{label: [(x, y) per seed]} -> a PNG: per label the mean over seeds and
  a shaded 95% t interval where two or more seeds reach x."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  bands = {label: _band(c) for label, c in curves.items()}
  bands = {k: v for k, v in bands.items() if v is not None}
  if not bands:
    return None
  fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
  colors = plt.get_cmap("tab10" if len(bands) <= 10 else "tab20")
  for i, (label, band) in enumerate(bands.items()):
    color = colors(i % colors.N)
    n = int(band["n"].max())
    ax.plot(band["x"], band["mean"], color=color, lw=1.5,
            marker="o" if len(band["x"]) == 1 else None,
            label=f"{label} (n={n})")
    ax.fill_between(band["x"], band["low"], band["high"], color=color,
                    alpha=0.2, lw=0)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title, fontsize=10)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, loc="best")
  fig.tight_layout()
  with io_utils.atomic_path(path) as tmp:
    fig.savefig(tmp, format="png")
  plt.close(fig)
  return path


def _export_owner(export: str) -> Optional[Tuple[str, int]]:
  """(pretrain name, seed) of an export path of a sweep directory."""
  match = re.search(r"(?:^|/)pretrain/([^/]+)/seed(\d+)/export/?$",
                    export.replace(os.sep, "/"))
  if match is None:
    return None
  return match.group(1), int(match.group(2))


def collect_results(sweep_dir: str) -> Dict[str, Any]:
  """The sweep's results from its workdirs alone (report.json's content)."""
  sweep_dir = os.path.abspath(sweep_dir)
  records = _records(sweep_dir)
  plan_path = os.path.join(sweep_dir, sweeping.PLAN)
  plan = (io_utils.read_json(plan_path) if os.path.exists(plan_path)
          else None)
  order: Dict[str, int] = {}
  planned: Dict[str, int] = {}  # runs of each stage/name in the plan
  if plan:
    for i, job in enumerate(plan["jobs"]):
      key = f"{job['stage']}/{job['name']}"
      order.setdefault(key, i)
      planned[key] = planned.get(key, 0) + 1
  by_id = {r["id"]: (w, r) for w, r in records}
  states: Dict[str, int] = {}
  failures = []
  seconds: Dict[str, float] = {}
  for workdir, record in records:
    states[record.get("state", "?")] = states.get(record.get("state", "?"),
                                                  0) + 1
    seconds[record["stage"]] = seconds.get(record["stage"], 0.0) + \
        record.get("seconds", 0.0)
    if record.get("state") == "failed":
      failures.append(dict(id=record["id"], error=record.get("error"),
                           attempts=record.get("attempts"),
                           log=os.path.relpath(
                               os.path.join(workdir, sweeping.LOG),
                               sweep_dir)))

  def configurations(stage: str) -> List[str]:
    names = sorted({r["name"] for _, r in records if r["stage"] == stage},
                   key=lambda n: (order.get(f"{stage}/{n}", 1 << 30), n))
    return names

  agents = []
  for name in configurations("train"):
    runs = sorted([(w, r) for w, r in records
                   if r["stage"] == "train" and r["name"] == name],
                  key=lambda wr: wr[1]["seed"])
    eval_returns, final_returns, env_steps, per_seed = [], [], [], []
    late_returns = []
    hours = []
    for workdir, record in runs:
      entry: Dict[str, Any] = dict(seed=record["seed"],
                                   state=record.get("state"))
      if record.get("state") == "done":
        hours.append(record.get("seconds", 0.0) / 3600)
        final = _final_return(os.path.join(workdir, "metrics.csv"))
        if final is not None:
          entry["env_steps"], entry["final_training_return"] = final
          env_steps.append(entry["env_steps"])
          if entry["final_training_return"] is not None:
            final_returns.append(entry["final_training_return"])
          late = _late_evaluation(os.path.join(workdir, "eval.csv"),
                                  entry["env_steps"])
          if late is not None:
            (entry["late_evaluation_return"], entry["late_evaluations"],
             entry["late_evaluation_episodes"]) = late
            late_returns.append(entry["late_evaluation_return"])
        evaluation = by_id.get(sweeping.run_id("evaluate", name,
                                               record["seed"]))
        scores_path = os.path.join(workdir, "eval", "scores.json")
        if evaluation and evaluation[1].get("state") == "done" and \
            os.path.exists(scores_path):
          scores = io_utils.read_json(scores_path)
          if os.path.basename(scores.get("checkpoint", "")) == \
              _latest_checkpoint(workdir):
            entry["evaluation_return"] = float(scores["mean"])
            entry["evaluation_episodes"] = int(scores["episodes"])
            eval_returns.append(entry["evaluation_return"])
          else:
            entry["evaluation"] = "stale (an older checkpoint)"
      per_seed.append(entry)
    config_file = runs[0][1].get("config_file", "") if runs else ""
    agents.append(dict(
        name=name, config_file=config_file,
        envmodel=_envmodel_name(runs[0][1]) if runs else "",
        runs=max(planned.get(f"train/{name}", 0), len(runs)),
        done=sum(r.get("state") == "done" for _, r in runs),
        evaluation_return=summarise(eval_returns),
        final_training_return=summarise(final_returns),
        late_evaluation_return=summarise(late_returns),
        env_steps=summarise(env_steps),
        hours_per_run=float(np.mean(hours)) if hours else None,
        seeds=per_seed))

  table_rows: Dict[Tuple[str, int], Dict[str, Any]] = {}
  for workdir, record in records:
    if record["stage"] != "evaluate_models" or record.get("state") != "done":
      continue
    path = os.path.join(workdir, "model_table.json")
    if not os.path.exists(path):
      continue
    for row in io_utils.read_json(path)["models"]:
      owner = _export_owner(row["export"])
      if owner is not None:
        table_rows[owner] = row

  models = []
  for name in configurations("pretrain"):
    runs = sorted([(w, r) for w, r in records
                   if r["stage"] == "pretrain" and r["name"] == name],
                  key=lambda wr: wr[1]["seed"])
    nats, kls, per_seed, hours = [], [], [], []
    from_table: Dict[str, List[float]] = {
        key: [] for key in TABLE_VALUES + TABLE_SERIES}
    for workdir, record in runs:
      entry = dict(seed=record["seed"], state=record.get("state"))
      done_path = os.path.join(workdir, "pretrain_done.json")
      if record.get("state") == "done" and os.path.exists(done_path):
        hours.append(record.get("seconds", 0.0) / 3600)
        done = io_utils.read_json(done_path)
        entry.update(step=done["step"], held_out_nats_per_frame=float(
            done["held_out"]["log_likelihood_per_frame"]))
        nats.append(entry["held_out_nats_per_frame"])
        # Latent models only: the posterior-to-prior KL per model step,
        # summed over the latent (near 0: the latent carries nothing).
        if (record.get("config", {}).get("kind") in LATENT_KINDS and
            done["held_out"].get("kl") is not None):
          entry["posterior_kl_per_step"] = float(done["held_out"]["kl"])
          kls.append(entry["posterior_kl_per_step"])
        row = table_rows.get((name, record["seed"]))
        if row is not None:
          entry["label"] = row["label"]
          for key, values in from_table.items():
            value = row.get(key)
            if key in TABLE_SERIES:
              value = value[-1] if value else None
            if value is not None:
              entry[key] = value
              values.append(value)
      per_seed.append(entry)
    config = runs[0][1].get("config", {}) if runs else {}
    models.append(dict(
        name=name, config_file=runs[0][1].get("config_file", "") if runs
        else "", kind=config.get("kind"), jump=config.get("jump"),
        action_free=config.get("action_free"),
        train_steps=config.get("train_steps"),
        batch_size=config.get("batch_size"),
        runs=max(planned.get(f"pretrain/{name}", 0), len(runs)),
        done=sum(r.get("state") == "done" for _, r in runs),
        held_out_nats_per_frame=summarise(nats),
        posterior_kl_per_step=summarise(kls),
        **{key: summarise(values) for key, values in from_table.items()},
        hours_per_run=float(np.mean(hours)) if hours else None,
        seeds=per_seed))
  invocations = []
  sweep_path = os.path.join(sweep_dir, sweeping.SWEEP)
  if os.path.exists(sweep_path):
    invocations = io_utils.read_json(sweep_path).get("invocations", [])
  total = len(plan["jobs"]) if plan else len(records)
  return dict(
      name=(plan or {}).get("name") or os.path.basename(sweep_dir),
      sweep_dir=sweep_dir,
      generated=datetime.datetime.now().isoformat(timespec="seconds"),
      runs_planned=total,
      states=states, failures=failures, compute_seconds=seconds,
      invocations=len(invocations),
      invocation_seconds=sum(i.get("seconds", 0.0) for i in invocations),
      confidence=0.95, agents=agents, models=models,
      comparisons=agent_comparisons(agents))


def _envmodel_name(record: Dict[str, Any]) -> str:
  export = (record.get("config") or {}).get("envmodel") or ""
  owner = _export_owner(export) if export else None
  return f"pretrain/{owner[0]}" if owner else ""


def write_report(sweep_dir: str) -> Dict[str, str]:
  """report/report.md, report/report.json and the learning curves, from the
  sweep directory's workdirs alone (atomically written)."""
  sweep_dir = os.path.abspath(sweep_dir)
  if not os.path.isdir(sweep_dir):
    raise ValueError(f"{sweep_dir} is no sweep directory (it does not "
                     "exist).")
  results = collect_results(sweep_dir)
  out = os.path.join(sweep_dir, sweeping.REPORT)
  os.makedirs(out, exist_ok=True)
  records = _records(sweep_dir)
  pictures: Dict[str, str] = {}
  agent_curves: Dict[str, list] = {}
  evaluation_curves: Dict[str, list] = {}
  model_curves: Dict[str, list] = {}
  for workdir, record in records:
    if record["stage"] == "train":
      curve = _csv_curve(os.path.join(workdir, "metrics.csv"), "env_steps",
                         "episode_return")
      if curve is not None:
        agent_curves.setdefault(record["name"], []).append(curve)
      curve = _csv_curve(os.path.join(workdir, "eval.csv"), "env_steps",
                         "return_mean")
      if curve is not None:
        evaluation_curves.setdefault(record["name"], []).append(curve)
    elif record["stage"] == "pretrain":
      curve = _csv_curve(os.path.join(workdir, "eval.csv"), "step",
                         "log_likelihood_per_frame")
      if curve is not None:
        model_curves.setdefault(record["name"], []).append(curve)
  order_agents = [a["name"] for a in results["agents"]]
  order_models = [m["name"] for m in results["models"]]
  title = f"{results['name']}: mean over seeds, shaded 95% t interval"
  for key, filename, curves, order, x_label, y_label in (
      ("agents", "agents_learning_curves.png", agent_curves, order_agents,
       "environment steps", "episode return (training)"),
      ("agents_evaluation", "agents_evaluation_curves.png",
       evaluation_curves, order_agents, "environment steps",
       "evaluation return (during training)"),
      ("models", "models_held_out.png", model_curves, order_models,
       "pretraining step", "held-out log-likelihood (nats/frame)")):
    path = band_plot(os.path.join(out, filename),
                     {k: curves[k] for k in order if k in curves},
                     x_label, y_label, title)
    if path:
      pictures[key] = path
  results["pictures"] = {k: os.path.relpath(v, out)
                         for k, v in pictures.items()}
  text = markdown(results)
  md_path = os.path.join(out, "report.md")
  json_path = os.path.join(out, "report.json")
  io_utils.atomic_write_json(json_path, results)
  io_utils.atomic_write_text(md_path, text)
  return dict(markdown=md_path, json=json_path, **pictures)


def markdown(results: Dict[str, Any]) -> str:
  """report.md of `results` (collect_results', or sweep_combine's)."""
  states = results["states"]
  done = states.get("done", 0)
  sources = results.get("sources")
  where = (f"combined from the reports {', '.join(sources)} (seed by seed; "
           "each report's learning curves stay with it)" if sources else
           f"from the workdirs in {results['sweep_dir']}")
  counted = (f"{done} pretraining and training runs done" if sources else
             f"{done} of {results['runs_planned']} runs done")
  lines = [
      f"# Sweep {results['name']}", "",
      counted
      + "".join(f", {states[s]} {s}" for s in ("failed", "stopped", "running")
                if states.get(s)) +
      f"; {results['invocations']} invocation(s), "
      f"{results['invocation_seconds'] / 3600:.2f} hours in all. Generated "
      f"{results['generated']} {where}.",
      "",
      "Each value is the mean over seeds ± the half-width of the 95% "
      "Student t interval [low, high] (n = seeds with a result); with one "
      "seed there is no interval. Only finished runs count.", ""]
  if results["models"]:
    lines += [
        "## Environment models", "",
        "Held-out log-likelihood per frame in nats (pretraining's final "
        "evaluation on the test split; the ELBO for latent models), and, "
        "where the grid runs `evaluate_models`, the rollout time relative "
        "to AR and the improvement over the VAE baseline measured with the "
        "models of the same seed. For models with a latent variable, the "
        "held-out KL from the posterior to the prior per model step, "
        "summed over the latent (near 0: a collapsed posterior, whose "
        "latent the model does not use). Action effect: the pixels per "
        "frame, T model steps ahead, that change by more than 0.1 when the "
        "model is given random instead of the recorded actions "
        "(`evaluate_models`; 0: the model ignores its actions). Open-loop "
        "MSE: per pixel, T model steps ahead of the context frames with the "
        "recorded actions, beside copying the last context frame on the "
        "same windows (`evaluate_models`).", "",
        "| configuration | kind | jump | steps x batch | runs done | held-out "
        "nats/frame | relative rollout time (AR = 1) | improvement over VAE "
        "| KL (nats/step) | action effect (pixels) | open-loop MSE | "
        "copy-last-frame MSE | hours/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in results["models"]:
      kind = (m["kind"] or "") + (" (action-free)" if m.get("action_free")
                                  else "")
      lines.append(
          f"| {m['name']} | {kind} | {m['jump']} | {m['train_steps']} x "
          f"{m['batch_size']} | {m['done']}/{m['runs']} | "
          f"{_fmt(m['held_out_nats_per_frame'], '.1f')} | "
          f"{_fmt(m['relative_rollout_time'], '.3f')} | "
          f"{_fmt(m['improvement_over_vae'], '+.1f')} | "
          f"{_fmt(m.get('posterior_kl_per_step'), '.3g')} | "
          f"{_fmt(m.get('action_changed_pixels'), '.1f')} | "
          f"{_fmt(m.get('open_loop_mse'), '.5f')} | "
          f"{_fmt(m.get('copy_last_frame_mse'), '.5f')} | "
          f"{_hours(m['hours_per_run'])} |")
    if "models" in results["pictures"]:
      lines += ["", f"![held-out nats]({results['pictures']['models']})"]
    lines.append("")
  if results["agents"]:
    lines += [
        "## Agents", "",
        "Evaluation return: `python -m i2a.evaluate`'s mean return "
        "(eval/scores.json) of each run's final checkpoint. Training return: "
        f"the mean episode return over the last {LAST_FRACTION:.0%} of the "
        f"run's env steps (metrics.csv): a policy still learning, which an "
        "agent that adapts within its episodes raises above its "
        "checkpoints' (benchmarks/online_adaptation.py). Evaluation return, "
        "last "
        f"{LAST_FRACTION:.0%}: the "
        "mean return of the evaluations made during training "
        "(`config.eval_every`, eval.csv; the policy and seeds of "
        "`python -m i2a.evaluate`) in the last "
        f"{LAST_FRACTION:.0%} of the run's env steps, over all their "
        "episodes: steadier than one final checkpoint's.", "",
        "| configuration | envmodel | runs done | "
        + "".join(f"{label} | " for _, label in COMPARED)
        + "env steps | hours/run |",
        "|---|---|---|---|---|---|---|---|"]
    for a in results["agents"]:
      steps = a["env_steps"]
      lines.append(
          f"| {a['name']} | {a['envmodel'] or '-'} | {a['done']}/{a['runs']} "
          f"| {''.join(f'{_fmt(a.get(key))} | ' for key, _ in COMPARED)}"
          f"{'-' if steps is None else format(steps['mean'], ',.0f')} | "
          f"{_hours(a['hours_per_run'])} |")
    lines += _comparisons_markdown(results.get("comparisons") or [])
    if "agents" in results["pictures"]:
      lines += ["", f"![learning curves]({results['pictures']['agents']})"]
    if "agents_evaluation" in results["pictures"]:
      lines += ["", "![evaluation during training]"
                f"({results['pictures']['agents_evaluation']})"]
    lines.append("")
  if results["failures"]:
    lines += ["## Failed runs", "", "| run | attempts | error | log |",
              "|---|---|---|---|"]
    for f in results["failures"]:
      error = (f["error"] or "").replace("|", "\\|").replace("\n", " ")
      lines.append(f"| {f['id']} | {f['attempts']} | {error[:300]} | "
                   f"{f['log']} |")
    lines.append("")
  return "\n".join(lines)


def agents_of(where: str) -> Dict[str, Dict[str, Any]]:
  """The agent configurations, by name, of the sweep directory `where`,
  or of `where`/report.json where it holds no runs (a combined report)."""
  if not os.path.isdir(where):
    raise ValueError(f"--compare: {where} is no sweep or report directory "
                     "(it does not exist).")
  results = collect_results(where)
  path = os.path.join(where, "report.json")
  if not results["agents"] and os.path.isfile(path):
    results = io_utils.read_json(path)
  return {a["name"]: a for a in results.get("agents", [])}


def compare(where: str, names: Sequence[str]) -> str:
  """`python -m i2a.sweep --compare=A,B`: A's returns minus B's (the
  values of COMPARED with two or more seeds on each side), as a markdown
  table, from the runs of the sweep directory `where`, or from
  `where`/report.json where it holds no runs (a combined report). A name
  `NAME@DIR` is configuration NAME of another such directory (the same
  configuration at another budget or learning rate, in a sweep directory
  of its own); the table names it so."""
  if len(names) != 2:
    raise ValueError(f"--compare takes two configurations, A,B; given "
                     f"{len(names)}: {','.join(names)}.")
  found = []
  for qualified in names:
    name, _, other = qualified.partition("@")
    agents = agents_of(other or where)
    if name not in agents:
      raise ValueError(f"--compare: {other or where} has no agent "
                       f"configuration {name!r}; it has "
                       f"{', '.join(agents) or 'none'}.")
    found.append(dict(agents[name], name=qualified))
  if found[0]["name"] == found[1]["name"]:
    raise ValueError(f"--compare: {names[0]} against itself; name two "
                     "configurations, or one of another directory as "
                     "NAME@DIR.")
  rows = agent_comparisons([found[1], found[0]])
  if not rows:
    return (f"{names[0]} against {names[1]}: no value with two or more "
            "seeds on each side.")
  return "\n".join(_comparisons_markdown(rows)).strip("\n")


def _comparisons_markdown(comparisons: Sequence[Dict[str, Any]]
                          ) -> List[str]:
  """The agents' table's comparisons (agent_comparisons) as rows."""
  if not comparisons:
    return []
  labels = dict(COMPARED)
  reference = comparisons[0]["reference"]
  lines = [
      "", f"Against {reference}: each configuration's mean minus "
      f"{reference}'s, ± the half-width of the 95% Welch t interval "
      "[low, high] (unequal variances; the seeds with a value on each "
      "side); separated: the interval excludes 0.", "",
      "| configuration | value | difference | separated |",
      "|---|---|---|---|"]
  for c in comparisons:
    difference = Difference(**{k: c[k] for k in (
        "mean", "n_a", "n_b", "df", "half_width", "low", "high",
        "confidence")})
    lines.append(f"| {c['name']} | {labels.get(c['value'], c['value'])} | "
                 f"{difference.format()} | "
                 f"{'yes' if c['separated'] else 'no'} |")
  return lines


def _hours(value: Optional[float]) -> str:
  return "-" if value is None else f"{value:.2f}"
