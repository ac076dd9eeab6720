"""The layers of docs/architecture.md, checked on the source: every import
arrow points down (binaries -> runtimes -> agents -> envmodels).

Walks every module of envmodels/, agents/, i2a/ and configs/ with `ast`
(nothing is imported, so the test takes well under a second) and fails on
an arrow that points up, naming the module, the line and the forbidden
target. The binaries are the modules of setup.py's BINARIES (the console
scripts), read from setup.py's source.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Iterator, List, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("envmodels", "agents", "i2a", "configs")
# What only the binaries and their runtimes use: the workdir's identity and
# run records, pictures, progress lines, metrics files, atomic writes.
RUNTIME_HELPERS = ("i2a.run", "i2a.runs", "i2a.pictures", "i2a.progress",
                   "i2a.metrics", "i2a.io_utils")


def binaries() -> Tuple[str, ...]:
  """The binary modules (i2a.collect, ...): the values of setup.py's
  BINARIES dict, read with ast."""
  with open(os.path.join(ROOT, "setup.py")) as f:
    tree = ast.parse(f.read())
  for node in tree.body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and
        getattr(node.targets[0], "id", None) == "BINARIES"):
      return tuple(sorted(ast.literal_eval(node.value).values()))
  raise AssertionError("setup.py defines no BINARIES dict.")


def forbidden_targets() -> Dict[str, Tuple[str, ...]]:
  """Importing package prefix -> the module prefixes it must not import."""
  bins = binaries()
  return {
      "envmodels": ("agents", "i2a"),
      "agents": RUNTIME_HELPERS + bins,
      "i2a.run": bins,
      "configs": ("i2a.run",) + bins,
  }


def _within(module: str, prefix: str) -> bool:
  return module == prefix or module.startswith(prefix + ".")


def module_name(path: str) -> str:
  """envmodels/base.py -> envmodels.base; agents/__init__.py -> agents."""
  parts = os.path.relpath(path, ROOT)[:-len(".py")].split(os.sep)
  if parts[-1] == "__init__":
    parts = parts[:-1]
  return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool = False
                     ) -> Iterator[Tuple[int, str]]:
  """(line, module) for every import in `source`, at any depth (imports
  inside functions count): `import a.b` gives a.b, `from a import b` gives
  a.b (b may be a module) and relative imports are resolved against
  `module`; importlib.import_module("a.b") with a literal gives a.b."""
  package = module if is_package else module.rpartition(".")[0]
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        anchor = package.split(".")
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
      for alias in node.names:
        yield node.lineno, f"{base}.{alias.name}" if base else alias.name
    elif (isinstance(node, ast.Call) and node.args and
          isinstance(node.args[0], ast.Constant) and
          isinstance(node.args[0].value, str) and
          ((isinstance(node.func, ast.Attribute) and
            node.func.attr == "import_module") or
           (isinstance(node.func, ast.Name) and
            node.func.id in ("import_module", "__import__")))):
      yield node.lineno, node.args[0].value


def violations(module: str, source: str, is_package: bool = False
               ) -> List[str]:
  """'module:line imports target (forbidden: layer -> prefix)' for every
  upward arrow of `module`."""
  found = []
  for layer, targets in forbidden_targets().items():
    if not _within(module, layer):
      continue
    for line, target in imported_modules(source, module, is_package):
      for prefix in targets:
        if _within(target, prefix):
          found.append(f"{module}:{line} imports {target} (forbidden: "
                       f"{layer} -> {prefix})")
  return found


def source_files() -> Iterator[str]:
  for package in PACKAGES:
    for directory, _, files in os.walk(os.path.join(ROOT, package)):
      for name in sorted(files):
        if name.endswith(".py"):
          yield os.path.join(directory, name)


def test_the_binaries_are_read_from_setup():
  assert "i2a.train" in binaries() and "i2a.sweep" in binaries()
  assert len(binaries()) == 9


def test_every_import_arrow_points_down():
  found, walked = [], set()
  for path in source_files():
    module = module_name(path)
    walked.add(module.split(".")[0])
    with open(path) as f:
      found += violations(module, f.read(),
                          os.path.basename(path) == "__init__.py")
  assert walked == set(PACKAGES)
  assert not found, ("imports that point up the layers of "
                     "docs/architecture.md:\n" + "\n".join(found))


def test_every_runtime_lives_in_i2a_run():
  """No binary's runtime left beside the binaries or in agents/."""
  for old in ("i2a/collection.py", "i2a/pretraining.py", "i2a/launching.py",
              "i2a/model_evaluation.py", "i2a/sweeping.py",
              "agents/training.py", "agents/evaluation.py",
              "agents/distributed.py", "agents/planning/running.py"):
    assert not os.path.exists(os.path.join(ROOT, old)), old


@pytest.mark.parametrize("module,source,expected", [
    ("envmodels.base", "import numpy\n\nimport agents.base\n",
     ["envmodels.base:3 imports agents.base (forbidden: envmodels -> "
      "agents)"]),
    ("agents.acting", "def f():\n  from i2a import runs, environments\n",
     ["agents.acting:2 imports i2a.runs (forbidden: agents -> i2a.runs)"]),
    ("agents.learning", "from i2a.run.train import Trainer\n",
     ["agents.learning:1 imports i2a.run.train.Trainer (forbidden: agents "
      "-> i2a.run)"]),
    ("agents.planning.cem", "from ..a2c import networks\n"
     "import importlib\nimportlib.import_module('i2a.plan')\n",
     ["agents.planning.cem:3 imports i2a.plan (forbidden: agents -> "
      "i2a.plan)"]),
    ("i2a.run.sweep", "from i2a import cli, train\n",
     ["i2a.run.sweep:1 imports i2a.train (forbidden: i2a.run -> i2a.train)"]),
    ("i2a.run.train", "from . import evaluate\nfrom i2a import runs\n", []),
    ("agents.imagination.networks",
     "from i2a.environments import Protocol\nfrom i2a.replay import tables\n",
     []),
])
def test_an_upward_arrow_is_named(module, source, expected):
  assert violations(module, source) == expected
