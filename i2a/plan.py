r"""python -m i2a.plan: model-predictive control with a frozen envmodel.

  python -m i2a.plan --config=configs/agents/planning.py:minipacman \
      --config.envmodel=PRETRAIN_WORKDIR/export --workdir=DIR
  (--config.envmodel=oracle plans with the emulator;
   --config.policy=random plays the uniform random baseline)

Plans every model step with the categorical cross-entropy method over the
model's predicted rewards (agents/planning, docs/planning.md), under the
protocol the export was trained with, for config.episodes episodes. Writes
DIR/{config.json, protocol.json} and DIR/eval/{scores.json,
episode_000.gif, episode_000.png}.
"""

import json

from absl import flags

from agents.planning import running
from i2a import cli

_CONFIG = cli.DEFINE_config_file(
    "config", "configs/agents/planning.py:minipacman",
    "Planner config file[:preset]: configs/agents/planning.py.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (required).")
cli.require_unless_print_config(_WORKDIR)
flags.adopt_module_key_flags(cli)


def main(argv):
  del argv
  cli.start(_CONFIG, [_WORKDIR])
  scores = running.run(_CONFIG.value, _WORKDIR.value)
  summary = {k: scores[k] for k in ("policy", "envmodel", "mean", "std",
                                    "episodes", "env_steps",
                                    "plan_seconds_per_env_step")}
  print(json.dumps(summary), flush=True)
  print(f"wrote {scores['video']} and the scores next to it", flush=True)


def entry() -> None:
  """The console script i2a-plan."""
  cli.run(main, __name__)


if __name__ == "__main__":
  entry()
