"""One table from the reports of several sweep directories of one grid
(`python -m i2a.sweep --combine=A/report.json,B/report.json --workdir=OUT`).

A grid's seeds may finish in different sweep directories: on different
machines, or after a sweep directory was lost and its remaining runs were
made in a new one. Each directory's report (sweep.write_report) lists
every configuration's per-seed results; this module merges them per
configuration and seed, recomputes the mean and the 95% Student t
interval over the seeds, and writes OUT/report.md and OUT/report.json in
the sweep report's format, naming the reports it was made from. A seed
with a result in two reports is refused (two runs of one seed: keep the
one you mean), or, with `--duplicates=first` or `last`, taken from the
first or the last report that has it, the other listed as left out.
Learning curves are not merged (the reports hold final values only):
each source report's pictures stay with it.
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from i2a import io_utils
from i2a.run import sweep_report as reporting

# Per stage: the per-seed values summarised over seeds.
_AGENT_VALUES = ("evaluation_return", "late_evaluation_return",
                 "final_training_return", "env_steps")
_MODEL_VALUES = ("held_out_nats_per_frame", "relative_rollout_time",
                 "improvement_over_vae", "posterior_kl_per_step",
                 "action_changed_pixels")
# What to do with a seed that has results in two reports.
DUPLICATES = ("refuse", "first", "last")


def _has_result(entry: Dict[str, Any], values: Sequence[str]) -> bool:
  return entry.get("state") == "done" and any(
      entry.get(v) is not None for v in values)


def _merge(rows: List[Tuple[str, Dict[str, Any]]], values: Sequence[str],
           kind: str, duplicates: str, dropped: List[Dict[str, Any]]
           ) -> List[Dict[str, Any]]:
  """Configurations (first appearance order) with their seeds merged; a
  seed with results in two reports is refused, or the first or the last
  report's result kept (`duplicates`) and the other appended to
  `dropped`."""
  merged: Dict[str, Dict[str, Any]] = {}
  seeds: Dict[str, Dict[int, Tuple[str, Dict[str, Any]]]] = {}
  hours: Dict[str, List[Tuple[float, int]]] = {}
  for source, row in rows:
    name = row["name"]
    if name not in merged:
      merged[name] = {k: v for k, v in row.items()
                      if k not in values + ("seeds", "runs", "done",
                                            "hours_per_run")}
      seeds[name], hours[name] = {}, []
    if row.get("hours_per_run") is not None and row.get("done"):
      hours[name].append((row["hours_per_run"], row["done"]))
    for entry in row.get("seeds", []):
      seed = entry["seed"]
      before = seeds[name].get(seed)
      if before is not None and _has_result(before[1], values) and \
          _has_result(entry, values):
        if duplicates == "refuse":
          raise ValueError(
              f"{kind} {name!r} seed {seed} has a result in {before[0]} "
              f"and in {source}: two runs of one seed; combine the reports "
              "that hold the run you mean, or keep the first or the last "
              "report's (--duplicates=first or last).")
        drop, keep = ((dict(entry, report=source), before) if
                      duplicates == "first" else
                      (before[1], (source, dict(entry, report=source))))
        dropped.append(dict(drop, kind=kind, name=name,
                            kept_from=keep[0]))
        seeds[name][seed] = keep
        continue
      if before is None or _has_result(entry, values):
        seeds[name][seed] = (source, dict(entry, report=source))
  out = []
  for name, row in merged.items():
    entries = [seeds[name][s][1] for s in sorted(seeds[name])]
    done = [e for e in entries if _has_result(e, values)]
    for value in values:
      row[value] = reporting.summarise(
          [e[value] for e in done if e.get(value) is not None])
    weighted = hours[name]
    row.update(runs=len(entries), done=len(done), seeds=entries,
               hours_per_run=(float(np.average(
                   [h for h, _ in weighted], weights=[n for _, n in weighted]))
                              if weighted else None))
    out.append(row)
  return out


def combine(report_paths: Sequence[str], duplicates: str = "refuse"
            ) -> Dict[str, Any]:
  """The merged results (the format of sweep.collect_results, with
  `sources` and `duplicates`: the seeds' results left out)."""
  if duplicates not in DUPLICATES:
    raise ValueError(f"--duplicates must be one of {', '.join(DUPLICATES)}"
                     f", given {duplicates!r}.")
  if len(report_paths) < 2:
    raise ValueError("--combine needs two or more report.json files, given "
                     f"{len(report_paths)}.")
  reports = []
  for path in report_paths:
    if not os.path.isfile(path):
      raise ValueError(f"--combine: {path} does not exist (give the "
                       "report.json files that sweeps wrote under "
                       "SWEEP_DIR/report/).")
    report = io_utils.read_json(path)
    if not isinstance(report, dict) or "agents" not in report:
      raise ValueError(f"--combine: {path} is no sweep report (it has no "
                       "'agents').")
    reports.append((path, report))
  names = {r.get("name") for _, r in reports}
  if len(names) != 1:
    raise ValueError(f"--combine: the reports are of different grids "
                     f"({', '.join(sorted(map(str, names)))}); combine the "
                     "reports of one grid.")
  dropped: List[Dict[str, Any]] = []
  agents = _merge([(p, a) for p, r in reports for a in r["agents"]],
                  _AGENT_VALUES, "agent", duplicates, dropped)
  models = _merge([(p, m) for p, r in reports for m in r["models"]],
                  _MODEL_VALUES, "model", duplicates, dropped)
  states: Dict[str, int] = {}
  for row in agents + models:
    for entry in row["seeds"]:
      state = entry.get("state") or "?"
      states[state] = states.get(state, 0) + 1
  compute: Dict[str, float] = {}
  for _, report in reports:
    for stage, seconds in report.get("compute_seconds", {}).items():
      compute[stage] = compute.get(stage, 0.0) + seconds
  return dict(
      name=names.pop(), sweep_dir=None, sources=[p for p, _ in reports],
      generated=datetime.datetime.now().isoformat(timespec="seconds"),
      runs_planned=max(r.get("runs_planned", 0) for _, r in reports),
      # (states: per pretraining and training seed, not per job)
      states=states,
      failures=[f for _, r in reports for f in r.get("failures", [])],
      compute_seconds=compute,
      invocations=sum(r.get("invocations", 0) for _, r in reports),
      invocation_seconds=sum(r.get("invocation_seconds", 0.0)
                             for _, r in reports),
      confidence=0.95, agents=agents, models=models, pictures={},
      comparisons=reporting.agent_comparisons(agents),
      duplicates=dropped)


def _duplicates_markdown(dropped: Sequence[Dict[str, Any]]) -> str:
  if not dropped:
    return ""
  lines = ["## Seeds with results in two reports", "",
           "Each was counted once, from the report named as kept; the "
           "result below was left out.", "",
           "| configuration | seed | left out | from | kept from |",
           "|---|---|---|---|---|"]
  for d in dropped:
    values = _AGENT_VALUES if d["kind"] == "agent" else _MODEL_VALUES
    shown = ", ".join(f"{v} {d[v]:.2f}" for v in values
                      if d.get(v) is not None)
    lines.append(f"| {d['kind']} {d['name']} | {d['seed']} | {shown} | "
                 f"{d['report']} | {d['kept_from']} |")
  return "\n".join(lines) + "\n"


def write(report_paths: Sequence[str], out_dir: str,
          duplicates: str = "refuse") -> Dict[str, str]:
  """OUT/report.md and OUT/report.json (atomically written)."""
  results = combine(report_paths, duplicates)
  out_dir = io_utils.ensure_writable_dir(out_dir, "combined report directory")
  md_path = os.path.join(out_dir, "report.md")
  json_path = os.path.join(out_dir, "report.json")
  io_utils.atomic_write_json(json_path, results)
  text = reporting.markdown(results).rstrip("\n") + "\n"
  extra = _duplicates_markdown(results["duplicates"])
  io_utils.atomic_write_text(md_path, text + ("\n" + extra if extra else ""))
  return dict(markdown=md_path, json=json_path)
