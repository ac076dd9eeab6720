"""python -m i2a.evaluate: scores and a video of a trained agent.

  python -m i2a.evaluate --workdir=TRAIN_WORKDIR --episodes=20 [--greedy]

Loads the newest checkpoint, the config and the protocol of a
`python -m i2a.train` workdir (and the envmodel export the agent was trained
with, or --envmodel if it moved), runs the episodes under the recorded
protocol and writes WORKDIR/eval/scores.json (returns, lengths, mean, std,
the checkpoint step), eval/episode_000.gif and eval/episode_000.png, and
for an I2A eval/imagination_stepNNNN.png (its imagined rollouts).
"""

import json

from absl import app, flags

from agents import evaluation
from i2a import cli

_WORKDIR = flags.DEFINE_string("workdir", None,
                               "The workdir of a `python -m i2a.train` run.",
                               required=True)
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


def main(argv):
  del argv
  scores = evaluation.evaluate(_WORKDIR.value, _EPISODES.value, _GREEDY.value,
                               _SEED.value, _ENVMODEL.value,
                               _VIDEO_FRAMES.value)
  summary = {k: scores[k] for k in ("mean", "std", "episodes",
                                    "checkpoint_step", "greedy")}
  print(json.dumps(summary), flush=True)
  print(f"wrote {scores['video']} and the scores next to it", flush=True)


if __name__ == "__main__":
  app.run(cli.reports_errors(main), flags_parser=cli.parse_flags)
