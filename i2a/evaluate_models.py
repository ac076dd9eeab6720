r"""python -m i2a.evaluate_models: the paper's Table 1 for exported envmodels.

  python -m i2a.evaluate_models --models=RUN_A/export,RUN_B/export \
      --data=COLLECT_WORKDIR/dataset [--output=DIR] [--T=10]

Writes DIR/model_table.md and DIR/model_table.json (default DIR:
./model_table): held-out nats per frame, improvement over the VAE baseline,
the open-loop MSE T model steps ahead against copying the last context
frame (over all pixels, and over the moving pixels alone: sprites, score,
eaten pellets), rollout time relative to AR (measured in this run),
imagined transitions/s,
computed in --precision (envmodels/precision.py; 'auto': bf16 where the CPU
has it) with TensorFlow's thread pools sized by --threads (as every other
binary sizes them; both recorded in model_table.json). Likelihoods are
computed in the same precision. DIR/run_info.json
records the invocations (i2a/runs.py). There is no --config or --workdir:
the flags above are the whole configuration (--print_config shows them).
"""

import os

from absl import flags

from envmodels import precision
from i2a import cli, runs
from i2a.run import evaluate_models as model_evaluation

_MODELS = flags.DEFINE_list("models", None, "Comma-separated export dirs "
                            "(required).")
cli.require_unless_print_config(_MODELS)
_DATA = flags.DEFINE_string("data", None, "Dataset dir (with train/ and "
                            "test/ splits) from python -m i2a.collect "
                            "(required).")
cli.require_unless_print_config(_DATA)
_OUTPUT = flags.DEFINE_string("output", "model_table", "Output directory.")
_T = flags.DEFINE_integer("T", 10, "Predicted steps after the context.")
_NUM_WINDOWS = flags.DEFINE_integer("num_windows", 256,
                                    "Held-out windows per model.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 16, "Evaluation batch size.")
_HORIZON = flags.DEFINE_integer("horizon", 12, "Rollout length in primitive "
                                "steps for the timing.")
_ROLLOUT_BATCH = flags.DEFINE_integer("rollout_batch", 32,
                                      "Rollouts timed in parallel.")
_PRECISION = flags.DEFINE_enum("precision", "auto", precision.PRECISIONS,
                               "Compute precision of the evaluation.")
_THREADS = flags.DEFINE_string(
    "threads", precision.THREADS_AUTO, "TensorFlow's thread pools: 'auto', "
    "'default' (TensorFlow's own) or 'INTRA,INTER' (envmodels/precision.py).")
flags.adopt_module_key_flags(cli)


def main(argv):
  del argv
  cli.start(holders=[_MODELS, _DATA, _OUTPUT, _T, _NUM_WINDOWS, _BATCH_SIZE,
                     _HORIZON, _ROLLOUT_BATCH, _PRECISION, _THREADS])
  try:
    threads = precision.set_threads(_THREADS.value)  # before any TF op
  except ValueError as e:
    raise SystemExit(f"--threads: {e}") from e
  resolved = precision.set_precision(_PRECISION.value)
  print(f"computing in {resolved} (--precision={_PRECISION.value}), "
        f"{threads['intra_op_threads']} intra-op and "
        f"{threads['inter_op_threads']} inter-op threads "
        f"(--threads={_THREADS.value})", flush=True)
  rows = model_evaluation.evaluate(
      _MODELS.value, _DATA.value, T=_T.value, num_windows=_NUM_WINDOWS.value,
      batch_size=_BATCH_SIZE.value, horizon=_HORIZON.value,
      rollout_batch=_ROLLOUT_BATCH.value)
  report = model_evaluation.write_report(rows, _OUTPUT.value, _HORIZON.value,
                                         _ROLLOUT_BATCH.value, _DATA.value)
  runs.record_run_info(os.path.dirname(report["markdown"]))
  print(report["table"])
  print(f"written {report['markdown']} and {report['json']}", flush=True)


def entry() -> None:
  """The console script i2a-evaluate-models."""
  cli.run(main, __name__)


if __name__ == "__main__":
  entry()
