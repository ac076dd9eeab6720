r"""python -m i2a.evaluate: scores and a video of a trained agent.

  python -m i2a.evaluate --workdir=TRAIN_WORKDIR --episodes=20 [--greedy]
      [--checkpoint=STEP] [--envs=16]

Loads the newest checkpoint (or that of learner step --checkpoint), the
config and the protocol of a `python -m i2a.train` workdir (and the
envmodel export the agent was trained with, or --envmodel if it moved),
runs the episodes under the recorded protocol (--envs of them at once,
one acting call for all) and writes, per checkpoint,
WORKDIR/eval/step_<STEP>/scores.json (returns, lengths, mean, std, the
checkpoint's learner and environment steps), episode_000.gif and
episode_000.png, and for an I2A imagination_stepNNNN.png (its imagined
rollouts); eval/index.json lists the evaluated checkpoints and
eval/scores.json is the newest one's scores. TensorBoard: WORKDIR/tb/evaluate
(docs/agents.md, "TensorBoard"). This invocation is added to
eval/run_info.json (i2a/runs.py). There is no --config: the run's
config.json is the config (--print_config shows it).
"""

import json
import os

from absl import flags

from i2a import cli, io_utils, runs
from i2a.run import evaluate as evaluation

_WORKDIR = flags.DEFINE_string(
    "workdir", None, "The workdir of a `python -m i2a.train` run "
    "(required); its config.json is the config (no --config).")
cli.require_unless_print_config(_WORKDIR)
_EPISODES = flags.DEFINE_integer(
    "episodes", None, "Episodes to run (default: the run's "
    "config.eval_episodes).")
_GREEDY = flags.DEFINE_bool("greedy", False,
                            "Take the most likely action instead of sampling.")
_SEED = flags.DEFINE_integer("seed", 0, "Seeds the episodes and sampling.")
_ENVMODEL = flags.DEFINE_string(
    "envmodel", "", "The envmodel export, if it moved since training "
    "(default: the run's config.envmodel).")
_VIDEO_FRAMES = flags.DEFINE_integer("video_frames", 400,
                                     "At most this many frames in the GIF.")
_CHECKPOINT = flags.DEFINE_integer(
    "checkpoint", None, "The learner step of the checkpoint to evaluate "
    "(default: the newest); earlier checkpoints' results are kept.")
_ENVS = flags.DEFINE_integer(
    "envs", evaluation.EVAL_ENVS, "Episodes played at once (one acting "
    "call for all): an agent without random numbers of its own plays the "
    "same episodes whatever this is; an I2A's rollouts draw theirs per "
    "batch.")
flags.adopt_module_key_flags(cli)


def _run_config() -> dict:
  """The evaluated run's config.json (for --print_config), if readable."""
  path = os.path.join(_WORKDIR.value or "", runs.CONFIG)
  try:
    return dict(config_file=path, config=io_utils.read_json(path))
  except (OSError, ValueError) as e:
    return dict(config_file=path, config=None, config_error=str(e))


def main(argv):
  del argv
  holders = [_WORKDIR, _EPISODES, _GREEDY, _SEED, _ENVMODEL, _VIDEO_FRAMES,
             _CHECKPOINT, _ENVS]
  cli.start(holders=holders,
            extra=_run_config() if cli.PRINT_CONFIG.value else None)
  scores = evaluation.evaluate(_WORKDIR.value, _EPISODES.value, _GREEDY.value,
                               _SEED.value, _ENVMODEL.value,
                               _VIDEO_FRAMES.value, _CHECKPOINT.value,
                               _ENVS.value)
  summary = {k: scores[k] for k in ("mean", "std", "episodes",
                                    "checkpoint_step", "env_steps", "frames",
                                    "greedy")}
  runs.record_run_info(os.path.join(_WORKDIR.value, "eval"))
  print(json.dumps(summary), flush=True)
  print(f"wrote {scores['video']} and the scores next to it", flush=True)


def entry() -> None:
  """The console script i2a-evaluate."""
  cli.run(main, __name__)


if __name__ == "__main__":
  entry()
