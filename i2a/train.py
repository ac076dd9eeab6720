r"""python -m i2a.train: train an agent (A2C, I2A) on a protocol's environment.

  python -m i2a.train --config=configs/agents/a2c.py:minipacman --workdir=DIR \
      [--config.env_steps=200000] [--config.envmodel=PRETRAIN_DIR/export]

Embedded mode: one process runs the Reverb server, the actor and the
learner (agents/training.py). Writes DIR/{config.json, protocol.json,
checkpoints/, tb/, metrics.csv, images/learning_curve.png}; rerunning in
the same workdir resumes from the newest checkpoint (a larger
--config.env_steps continues a finished run; a changed experiment is
refused). See docs/agents.md.
"""

from absl import flags

from agents import training
from i2a import cli

_CONFIG = cli.DEFINE_config_file(
    "config", "configs/agents/a2c.py:minipacman",
    "Agent config file[:preset] (configs/agents/a2c.py, i2a.py).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (required).")
cli.require_unless_print_config(_WORKDIR)
flags.adopt_module_key_flags(cli)


def main(argv):
  del argv
  cli.start(_CONFIG, [_WORKDIR])
  summary = training.run(_CONFIG.value, _WORKDIR.value)
  print(f"trained {summary['learner_steps']} learner steps, "
        f"{summary['env_steps']:,} env steps; recent mean return "
        f"{summary['recent_return']:.2f}; workdir {summary['workdir']}",
        flush=True)


def entry() -> None:
  """The console script i2a-train."""
  cli.run(main, __name__)


if __name__ == "__main__":
  entry()
