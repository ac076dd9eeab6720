r"""python -m i2a.demo (make demo): the whole pipeline, one command.

  python -m i2a.demo [--config=configs/demo.py:small] [--workdir=DIR]

Collects, pretrains the envmodels, evaluates them, trains an A2C and an I2A,
evaluates both and writes DIR/report.md; every stage resumes on a rerun.
Runtime: i2a/run/demo.py (the stages and the report).
"""

from __future__ import annotations

from absl import flags

from i2a import cli
from i2a.run import demo

_CONFIG = cli.DEFINE_config_file(
    "config", "configs/demo.py:small", "Demo config file[:preset].")
_WORKDIR = flags.DEFINE_string("workdir", "demo_workdir", "Demo directory.")
flags.adopt_module_key_flags(cli)


def main(argv):
  del argv
  cli.start(_CONFIG, [_WORKDIR])
  demo.run(_CONFIG.value, _WORKDIR.value)  # prints the report's path


def entry() -> None:
  """The console script i2a-demo."""
  cli.run(main, __name__)


if __name__ == "__main__":
  entry()
