"""Claim 1's table and held-out curves from `xla_pretrain.py`'s JSON.

Where it sits: `xla_pretrain.py` trains the `paper`-preset models through
XLA on a machine without the project's stack and writes one JSON; this
script (the project's interpreter: it reuses the sweep report's t
intervals and plots, i2a/run/sweep_report.py) turns it into a markdown
table beside it (mean and 95% t interval over the seeds of the final
held-out nats per frame, the improvement over the VAE baseline per seed,
the KL, the step's time relative to AR's) and a PNG of the held-out
curves (mean and 95% t band over the seeds).

  python benchmarks/xla_pretrain_report.py --input FILE.json
      writes FILE.md and FILE_held_out.png beside it
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

# pylint: disable=wrong-import-position
from i2a import io_utils
from i2a.run.sweep_report import _fmt, band_plot, summarise

BASELINE = "vae"
NAMES = {"vae": "VAE baseline", "ar": "AR", "rar": "RAR",
         "dssm_det": "dSSM-DET", "dssm_vae": "dSSM-VAE", "sssm": "sSSM",
         "jumpy_dssm_det": "jumpy dSSM-DET (c = 3)",
         "jumpy_sssm": "jumpy sSSM (c = 3)"}


def finals(record: Dict[str, Any]) -> Dict[str, Dict[int, Dict[str, float]]]:
  """{model: {seed: the last held-out evaluation}}, complete runs only."""
  out: Dict[str, Dict[int, Dict[str, float]]] = {}
  for run in record["runs"]:
    last = run["curve"][-1] if run["curve"] else None
    if last is not None and last["step"] == run["steps"]:
      out.setdefault(run["model"], {})[run["seed"]] = last
  return out


def table(record: Dict[str, Any]) -> str:
  done = finals(record)
  models = record["models"]
  ar_ms = models.get("ar", {}).get("step_ms")
  baseline = done.get(BASELINE, {})
  rows = []
  for name in sorted(done, key=lambda n: -np.mean(
      [v["log_likelihood_per_frame"] for v in done[n].values()])):
    seeds = done[name]
    ll = summarise([v["log_likelihood_per_frame"] for v in seeds.values()])
    over = ("(other jump)" if models[name]["jump"] != 1 else
            "0" if name == BASELINE else
            _fmt(summarise([v["log_likelihood_per_frame"] -
                            baseline[s]["log_likelihood_per_frame"]
                            for s, v in seeds.items() if s in baseline]),
                 ".1f") if baseline else "-")
    kl = summarise([v["kl"] for v in seeds.values() if "kl" in v])
    step_ms = models[name]["step_ms"]
    rows.append(
        f"| {NAMES.get(name, name)} | {_fmt(ll, '.1f')} | {over} | "
        f"{_fmt(kl, '.3g')} | "
        f"{step_ms:.1f} | "
        f"{step_ms / ar_ms if ar_ms else float('nan'):.2f} | "
        f"{models[name]['tflop_per_s']:.0f} | "
        f"{models[name]['relative_error_of_sums']:.1e} |")
  steps = record.get("steps")
  seeds = record.get("seeds")
  header = (
      f"Device: {record['device']}, jax {record['jax']}. {steps} steps of "
      f"batch {next(iter(models.values()))['batch_size']} per model and "
      f"seed (seeds {seeds}); held-out: {record.get('eval_windows', 256)} "
      "test windows, 3 context + 10 "
      "frames. Mean ± 95% t half-width [low, high] (n seeds).\n\n"
      "| model | held-out nats/frame | over the VAE | KL (nats/step) | "
      "step ms | step time (AR = 1) | TFLOP/s | rel. error vs TF |\n"
      "|---|---|---|---|---|---|---|---|\n")
  return header + "\n".join(rows) + "\n"


def curves(record: Dict[str, Any], path: str) -> None:
  """The held-out curves from the first evaluation after step 0 (the
  untrained models' values, down to -180,000 nats, would flatten the
  rest)."""
  by_model: Dict[str, List[Any]] = {}
  for run in record["runs"]:
    points = [c for c in run["curve"] if c["step"] > 0]
    if points:
      by_model.setdefault(NAMES.get(run["model"], run["model"]), []).append(
          (np.array([c["step"] for c in points], float),
           np.array([c["log_likelihood_per_frame"] for c in points])))
  band_plot(path, by_model, "pretraining step (batch 16)",
            "held-out log-likelihood, nats/frame",
            f"claim 1 at the paper preset (200x160), {record['device']}")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--input", required=True)
  args = parser.parse_args()
  with open(args.input) as f:
    record = json.load(f)
  stem = os.path.splitext(args.input)[0]
  with io_utils.atomic_path(stem + ".md") as tmp:
    with open(tmp, "w") as f:
      f.write(table(record))
  curves(record, stem + "_held_out.png")
  print(table(record))


if __name__ == "__main__":
  main()
