"""Claim 2 at a glance: each configuration's returns over its seeds, and
its difference from a reference, from the sweeps' reports alone.

  SWEEP_DIR/report/report.json, or a committed archive's
  benchmarks/results/<sweep>/archive/report/report.json
      -> rows: LABEL = configuration NAME of the report in DIR, each
         compared with the row of another label (its reference: the
         model-free baseline at the same learning rate)
      -> OUT/summary.png   left: each row's seeds (dots), their mean and
                           95% t interval (bar); right: the row's mean
                           minus its reference's and the 95% Welch
                           interval, a filled marker where the interval
                           excludes 0 (separated), a hollow one where not
      -> OUT/summary.md, summary.json   the same as a table and as numbers

The statistics are the sweep report's (i2a/run/statistics.py, the values
of `i2a.run.sweep_report.COMPARED`), so a row's difference is what
`python -m i2a.sweep --compare=NAME@DIR,REF@REF_DIR` prints. Rows whose
report lacks the configuration, or has no finished seed of it yet, are
listed as such and left out of the picture.

  PYTHONPATH=. python benchmarks/claim2_summary.py
      [--value evaluation_return] [--output benchmarks/results/claim2_3m]
      [--row 'LABEL=NAME@DIR>REFERENCE LABEL' ...]   (default: ROWS)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from i2a import io_utils  # pylint: disable=g-import-not-at-top
from i2a.run import sweep_report  # pylint: disable=g-import-not-at-top
from i2a.run.statistics import t_interval, welch_interval  # pylint: disable=g-import-not-at-top

_RESULTS = "benchmarks/results"
_REGULAR_3M = f"{_RESULTS}/i2a_minipacman_regular_3m/archive/report"
_LR7E4 = f"{_RESULTS}/i2a_minipacman_regular_3m_lr7e-4/archive/report"
_AGENT_3M = f"{_RESULTS}/i2a_minipacman_regular_agent_data_3m/archive/report"
_AGENT_LR7E4 = (f"{_RESULTS}/i2a_minipacman_regular_agent_data_3m_lr7e-4/"
                "archive/report")

# Claim 2 on MiniPacman-regular at 3M env steps (docs/results.md): every
# configuration against A2C at its learning rate.
ROWS = (
    "A2C, 2e-3=a2c@" + _REGULAR_3M,
    "copy model, 2e-3=copy_model@" + _REGULAR_3M + ">A2C, 2e-3",
    "distillation, 2e-3=distill_dssm_det@" + _REGULAR_3M + ">A2C, 2e-3",
    "distillation, agent-data models, 2e-3=distill_dssm_det@" + _AGENT_3M +
    ">A2C, 2e-3",
    "emulator oracle, 2e-3=emulator_oracle@" + _REGULAR_3M + ">A2C, 2e-3",
    "A2C, 7e-4=a2c@" + _LR7E4,
    "copy model, 7e-4=copy_model@" + _LR7E4 + ">A2C, 7e-4",
    "distillation, 7e-4=distill_dssm_det@" + _LR7E4 + ">A2C, 7e-4",
    "distillation, agent-data models, 7e-4=distill_dssm_det@" + _AGENT_LR7E4 +
    ">A2C, 7e-4",
    "distillation, free-nats sSSM, 7e-4=distill_sssm_free_nats@" + _LR7E4 +
    ">A2C, 7e-4",
    "distillation, collapsed sSSM, 7e-4=distill_sssm@" + _LR7E4 +
    ">A2C, 7e-4",
    "learning to query, 7e-4=learning_to_query@" + _LR7E4 + ">A2C, 7e-4",
    "uniform rollouts, 7e-4=uniform_rollouts@" + _LR7E4 + ">A2C, 7e-4",
    "pixel imaginations, 7e-4=pixel_imagination@" + _LR7E4 + ">A2C, 7e-4",
    "imagination prior, collapsed sSSM, 7e-4=imagination_prior@" + _LR7E4 +
    ">A2C, 7e-4",
    "imagination prior, free-nats sSSM, 7e-4=imagination_prior_free_nats@" +
    _LR7E4 + ">A2C, 7e-4",
    "emulator oracle, 7e-4=emulator_oracle@" + _LR7E4 + ">A2C, 7e-4",
)


@dataclasses.dataclass
class Row:
  """One configuration of one report, and the label of its reference."""
  label: str
  name: str
  where: str
  reference: Optional[str] = None
  values: List[float] = dataclasses.field(default_factory=list)
  missing: str = ""  # why the row has no values, where it has none


def parse_row(text: str) -> Row:
  """'LABEL=NAME@DIR' or 'LABEL=NAME@DIR>REFERENCE LABEL' -> Row."""
  label, eq, rest = text.partition("=")
  name, at, where = rest.partition("@")
  where, _, reference = where.partition(">")
  if not (eq and at and label.strip() and name.strip() and where.strip()):
    raise ValueError(
        f"--row {text!r}: expected 'LABEL=NAME@DIR' or "
        "'LABEL=NAME@DIR>REFERENCE LABEL' (NAME a configuration of the "
        "sweep or report directory DIR).")
  return Row(label.strip(), name.strip(), where.strip(),
             reference.strip() or None)


def read_rows(rows: Sequence[Row], value: str) -> List[Row]:
  """Fills each row's per-seed values of `value` from its report."""
  labels = [r.label for r in rows]
  for row in rows:
    if labels.count(row.label) > 1:
      raise ValueError(f"--row: the label {row.label!r} is given twice; "
                       "labels name the references, so each must be new.")
    if row.reference is not None and row.reference not in labels:
      raise ValueError(f"--row {row.label!r}: its reference "
                       f"{row.reference!r} is no row's label; the labels "
                       f"are {', '.join(labels)}.")
  for row in rows:
    if not os.path.isdir(row.where):
      row.missing = f"no report yet ({row.where} does not exist)"
      continue
    agents = sweep_report.agents_of(row.where)
    if row.name not in agents:
      row.missing = (f"no configuration {row.name!r} in {row.where} (it has "
                     f"{', '.join(agents) or 'none'})")
      continue
    row.values = sweep_report.seed_values(agents[row.name], value)
    if not row.values:
      row.missing = f"no finished seed with a {value}"
  return list(rows)


def summarise(rows: Sequence[Row]) -> List[Dict[str, Any]]:
  """Each row's interval over its seeds and its difference from its
  reference (None where either side lacks two seeds)."""
  by_label = {r.label: r for r in rows}
  out = []
  for row in rows:
    entry: Dict[str, Any] = dict(label=row.label, name=row.name,
                                 where=row.where, reference=row.reference,
                                 values=row.values, missing=row.missing)
    if row.values:
      entry["interval"] = dataclasses.asdict(t_interval(row.values))
    reference = by_label.get(row.reference or "")
    if (reference is not None and len(row.values) >= 2 and
        len(reference.values) >= 2):
      difference = welch_interval(row.values, reference.values)
      entry["difference"] = dict(dataclasses.asdict(difference),
                                 separated=difference.separated)
    out.append(entry)
  return out


def markdown(summary: Sequence[Dict[str, Any]], value_label: str) -> str:
  lines = [f"{value_label}: each row's mean ± the half-width of its 95% t "
           "interval [low, high] over its seeds, and its mean minus its "
           "reference's with the 95% Welch interval (separated: the "
           "interval excludes 0).", "",
           "| row | seeds | mean | reference | difference | separated |",
           "|---|---|---|---|---|---|"]
  for e in summary:
    if e["missing"]:
      lines.append(f"| {e['label']} | 0 | {e['missing']} | - | - | - |")
      continue
    interval = e["interval"]
    mean = (f"{interval['mean']:.1f}" if interval["half_width"] is None else
            f"{interval['mean']:.1f} ± {interval['half_width']:.1f} "
            f"[{interval['low']:.1f}, {interval['high']:.1f}]")
    difference = e.get("difference")
    if difference is None:
      diff, separated = "-", "-"
    else:
      diff = (f"{difference['mean']:+.1f} ± {difference['half_width']:.1f} "
              f"[{difference['low']:.1f}, {difference['high']:.1f}]")
      separated = "**yes**" if difference["separated"] else "no"
    lines.append(f"| {e['label']} | {len(e['values'])} | {mean} | "
                 f"{e['reference'] or '-'} | {diff} | {separated} |")
  return "\n".join(lines) + "\n"


def plot(path: str, summary: Sequence[Dict[str, Any]], value_label: str
         ) -> None:
  """The picture of the module docstring (rows top to bottom)."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  shown = [e for e in summary if e["values"]]
  if not shown:
    raise ValueError("No row has a finished seed: nothing to draw.")
  fig, (left, right) = plt.subplots(
      1, 2, sharey=True, figsize=(11, 0.45 * len(shown) + 1.6), dpi=100,
      gridspec_kw=dict(width_ratios=(3, 2)))
  colors = plt.get_cmap("tab10")
  references = sorted({e["reference"] or e["label"] for e in shown})
  rng = np.random.default_rng(0)  # the dots' vertical jitter only
  for y, e in enumerate(shown):
    color = colors(references.index(e["reference"] or e["label"]) % 10)
    interval = e["interval"]
    left.scatter(e["values"], y + rng.uniform(-0.15, 0.15, len(e["values"])),
                 s=12, color=color, alpha=0.5, lw=0)
    if interval["half_width"] is not None:
      left.plot([interval["low"], interval["high"]], [y, y], color=color,
                lw=2)
    left.plot(interval["mean"], y, "o", color=color, ms=6)
    difference = e.get("difference")
    if difference is not None:
      right.plot([difference["low"], difference["high"]], [y, y],
                 color=color, lw=2)
      right.plot(difference["mean"], y, "o", ms=7, color=color,
                 markerfacecolor=color if difference["separated"] else
                 "white")
  left.set_yticks(range(len(shown)))
  left.set_yticklabels([f"{e['label']} (n={len(e['values'])})"
                        for e in shown], fontsize=8)
  left.invert_yaxis()
  left.set_xlabel(f"{value_label}: seeds, mean, 95% t interval")
  right.axvline(0.0, color="black", lw=0.8)
  right.set_xlabel("minus the reference's mean,\n95% Welch interval "
                   "(filled: excludes 0)")
  for ax in (left, right):
    ax.grid(alpha=0.3, axis="x")
  fig.tight_layout()
  with io_utils.atomic_path(path) as tmp:
    fig.savefig(tmp, format="png")
  plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  values = dict(sweep_report.COMPARED)
  parser.add_argument("--value", default="evaluation_return",
                      choices=sorted(values))
  parser.add_argument("--row", action="append", default=None,
                      help="LABEL=NAME@DIR[>REFERENCE LABEL]; repeat it "
                      "(default: claim 2 at 3M env steps, ROWS)")
  parser.add_argument("--output", default=f"{_RESULTS}/claim2_3m")
  args = parser.parse_args(argv)
  rows = read_rows([parse_row(r) for r in (args.row or ROWS)], args.value)
  summary = summarise(rows)
  os.makedirs(args.output, exist_ok=True)
  table = markdown(summary, values[args.value])
  base = os.path.join(args.output, f"summary_{args.value}")
  plot(base + ".png", summary, values[args.value])
  io_utils.atomic_write_text(base + ".md", table)
  result = dict(value=args.value, rows=summary)
  io_utils.atomic_write_json(base + ".json", result)
  print(table, flush=True)
  print(f"wrote {base}.png, .md and .json", flush=True)
  return result


if __name__ == "__main__":
  main()
