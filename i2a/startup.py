"""Quiet start-up of the binaries: TensorFlow's import without its noise.

Where it sits: `import i2a` (the first import of every binary, before any
TensorFlow) defaults TF_CPP_MIN_LOG_LEVEL to 2 (a user's value wins) and
imports the stack inside `quiet_tensorflow_import()`, which drops the
"Unable to register cuDNN/cuFFT/cuBLAS factory" errors TensorFlow 2.15
prints at import on every machine, GPU or not (level 2 does not hide them;
level 3 would hide real errors too). Everything else printed to stderr
meanwhile is kept. Nothing is filtered when the user asks for TensorFlow's
INFO or WARNING logs (TF_CPP_MIN_LOG_LEVEL 0 or 1).

Imports nothing of the project, so it runs before envmodels loads
TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Iterator

LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
DEFAULT_LOG_LEVEL = "2"
SPURIOUS = re.compile(r"Unable to register cu(DNN|FFT|BLAS) factory")


def default_log_level() -> None:
  """TF_CPP_MIN_LOG_LEVEL=2 (no INFO/WARNING from TF's C++) unless set."""
  os.environ.setdefault(LOG_LEVEL_ENV, DEFAULT_LOG_LEVEL)


def _filtering() -> bool:
  if "tensorflow" in sys.modules:  # imported already: nothing to hide
    return False
  try:
    return int(os.environ.get(LOG_LEVEL_ENV, "0")) >= 2
  except ValueError:
    return False


@contextlib.contextmanager
def quiet_tensorflow_import() -> Iterator[None]:
  """Runs the block (an import that loads TensorFlow) with file descriptor
  2 captured, then writes back what was printed minus the spurious CUDA
  factory lines. A no-op when TensorFlow is loaded already or the log
  level asks for TensorFlow's logs."""
  if not _filtering():
    yield
    return
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      lines = captured.read().decode("utf-8", "replace").splitlines(True)
      kept = "".join(line for line in lines if not SPURIOUS.search(line))
      if kept:
        sys.stderr.write(kept)
        sys.stderr.flush()
