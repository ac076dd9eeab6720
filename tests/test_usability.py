"""Usability of the binaries: configs found from any directory, --print_config,
--help, console scripts, install metadata, run records, quiet start-up,
MiniPacman registered on import, launch's device placement."""

import json
import os
import re
import subprocess
import sys
from unittest import mock

import gymnasium
import ml_collections
import pytest
import setuptools
import tensorflow as tf
from tensorflow.python.framework import config as tf_config

from configs.envmodels import sssm
from envmodels import versions
from i2a import cli, launching, runs, startup
from i2a.environments import minipacman

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(**extra):
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      [REPO] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
  env.update(extra)
  return env


def _binary(args, cwd, timeout=240, **env):
  return subprocess.run([sys.executable, "-m"] + args, cwd=cwd,
                        env=_env(**env), capture_output=True, text=True,
                        timeout=timeout, check=False)


# -- Config files ---------------------------------------------------------------


def test_package_configs_are_found_from_another_directory(tmp_path,
                                                          monkeypatch):
  monkeypatch.chdir(tmp_path)
  found = cli.find_config_file("configs/agents/a2c.py")
  assert found == os.path.join(cli.PACKAGE_ROOT, "configs", "agents",
                               "a2c.py")
  assert cli.resolve_spec("configs/agents/a2c.py:tiny") == found + ":tiny"
  config = cli._ConfigFileParser(name="config").parse(  # pylint: disable=protected-access
      "configs/agents/a2c.py:tiny")
  assert config.preset == "tiny" and config.agent == "a2c"


def test_a_users_relative_path_stays_relative_to_the_cwd(tmp_path,
                                                         monkeypatch):
  monkeypatch.chdir(tmp_path)
  os.makedirs("configs/agents")
  with open("configs/agents/a2c.py", "w", encoding="utf-8") as f:
    f.write("import ml_collections\n\ndef get_config(preset=''):\n"
            "  return ml_collections.ConfigDict(dict(mine=preset))\n")
  assert cli.find_config_file("configs/agents/a2c.py") == (
      "configs/agents/a2c.py")
  config = cli._ConfigFileParser(name="config").parse(  # pylint: disable=protected-access
      "configs/agents/a2c.py:x")
  assert config.mine == "x"


def test_a_missing_config_file_says_where_it_looked(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(ValueError) as e:
    cli.find_config_file("configs/agents/nope.py")
  message = str(e.value)
  assert "'configs/agents/nope.py' not found" in message
  assert str(tmp_path) in message and cli.PACKAGE_ROOT in message
  with pytest.raises(ValueError, match="is not a file"):
    cli.find_config_file(str(tmp_path))


def test_help_lists_presets_and_keys():
  text = cli.describe_config_file("configs/envmodels/sssm.py:tiny")
  assert ("Presets of configs/envmodels/sssm.py: small, tiny, minipacman, "
          "paper") in text
  keys = list(sssm.get_config("tiny").keys())
  assert "data" in keys and "model" in keys
  assert f"Keys: {', '.join(keys)};" in text
  assert "--config.KEY=VALUE" in text


def test_print_config_from_another_directory_writes_nothing(tmp_path):
  result = _binary(["i2a.train", "--config=configs/agents/a2c.py:tiny",
                    "--config.env_steps=77", "--print_config",
                    "--workdir=run"], cwd=tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  printed = json.loads(result.stdout)
  assert printed["config_file"] == os.path.join(
      cli.PACKAGE_ROOT, "configs", "agents", "a2c.py") + ":tiny"
  assert printed["config"]["preset"] == "tiny"
  assert printed["config"]["env_steps"] == 77  # the override applied
  assert printed["flags"] == {"workdir": "run", "deterministic": False}
  assert os.listdir(tmp_path) == []  # no workdir, no run_info.json


@pytest.mark.slow
def test_a_real_tiny_run_from_another_directory(tmp_path):
  result = _binary(["i2a.collect", "--config=configs/collect.py:tiny",
                    "--workdir=run"], cwd=tmp_path, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  workdir = tmp_path / "run"
  assert (workdir / "dataset" / "train" / "manifest.json").exists()
  info = json.loads((workdir / runs.RUN_INFO).read_text())
  (invocation,) = info["invocations"]
  assert invocation["cwd"] == str(tmp_path)
  assert invocation["command"][-2:] == ["--config=configs/collect.py:tiny",
                                        "--workdir=run"]


# -- Quiet start-up --------------------------------------------------------------


def test_help_is_quiet_and_reads_well(tmp_path):
  env = _env()
  env.pop(startup.LOG_LEVEL_ENV, None)
  result = subprocess.run([sys.executable, "-m", "i2a.train", "--help"],
                          cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240, check=False)
  assert "Unable to register" not in result.stderr, result.stderr
  assert "oneDNN custom operations" not in result.stderr  # level 2 default
  # The usage keeps its lines (no docstring continuation joins them).
  assert ("--workdir=DIR \\\n      [--config.env_steps=200000]"
          in result.stdout)
  words = " ".join(result.stdout.split())  # absl wraps the flag help
  assert "Presets of configs/agents/a2c.py: small, tiny" in words
  assert "Keys: agent, allow_protocol_mismatch, batch_size," in words
  assert "--[no]print_config" in result.stdout
  assert "--[no]deterministic" in result.stdout


def test_the_import_filter_drops_only_the_cuda_factory_lines(capfd,
                                                             monkeypatch):
  monkeypatch.delitem(sys.modules, "tensorflow")  # as before its import
  monkeypatch.setenv(startup.LOG_LEVEL_ENV, "2")
  with startup.quiet_tensorflow_import():
    os.write(2, b"E cuda_dnn.cc] Unable to register cuDNN factory: again\n"
                b"a real error\n"
                b"E cuda_blas.cc] Unable to register cuBLAS factory: x\n")
  assert capfd.readouterr().err == "a real error\n"
  monkeypatch.setenv(startup.LOG_LEVEL_ENV, "0")  # the user wants it all
  with startup.quiet_tensorflow_import():
    os.write(2, b"Unable to register cuFFT factory\n")
  assert capfd.readouterr().err == "Unable to register cuFFT factory\n"


# -- Devices ---------------------------------------------------------------------


def test_setup_devices_on_a_cpu_machine_and_determinism():
  assert not tf.config.list_physical_devices("GPU")  # this machine
  assert cli.setup_devices() == []
  assert not tf_config.is_op_determinism_enabled()
  try:
    assert cli.setup_devices(deterministic=True) == []
    assert tf_config.is_op_determinism_enabled()
  finally:
    tf_config.disable_op_determinism()


def test_setup_devices_sets_memory_growth_on_every_gpu():
  gpus = [mock.Mock(name=f"/physical_device:GPU:{i}") for i in range(2)]
  with mock.patch.object(tf.config, "list_physical_devices",
                         return_value=gpus), \
       mock.patch.object(tf.config.experimental,
                         "set_memory_growth") as growth:
    cli.setup_devices()
  assert growth.call_args_list == [mock.call(gpu, True) for gpu in gpus]


def test_launch_keeps_actors_on_the_cpu_unless_asked(tmp_path):
  def children(**kwargs):
    launcher = launching.Launcher(
        ["--config=configs/agents/a2c.py:tiny"], str(tmp_path),
        num_actors=2, port=12345, echo=False, **kwargs)
    return {child.name: child for child in launcher.children}

  default = children(role_arguments=["--deterministic"])
  assert default["learner"].env == {}
  for name in ("actor-0", "actor-1", "server"):
    assert default[name].env == {launching.CUDA_DEVICES_ENV: ""}
  for child in default.values():
    assert "--deterministic" in child.arguments
  on_gpu = children(actors_on_gpu=True)
  assert all(child.env == {} for child in on_gpu.values())
  assert all("--deterministic" not in child.arguments
             for child in on_gpu.values())


# -- Environments ----------------------------------------------------------------


def test_minipacman_tasks_are_registered_on_import(tmp_path):
  code = ("import gymnasium, i2a.environments\n"
          "from i2a.environments.minipacman import TASKS\n"
          "for task in TASKS:\n"
          "  env = gymnasium.make(f'MiniPacman-{task}-v0')\n"
          "  obs, _ = env.reset(seed=0)\n"
          "  print(task, obs.shape)\n")
  result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True,
                          timeout=240, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  assert [line.split()[0] for line in result.stdout.splitlines()] == list(
      minipacman.TASKS)


def test_registration_is_idempotent():
  minipacman.register()
  minipacman.register()
  ids = [k for k in gymnasium.registry if k.startswith("MiniPacman-")]
  assert sorted(ids) == sorted(f"MiniPacman-{t}-v0" for t in minipacman.TASKS)


# -- Run records -----------------------------------------------------------------


def _git(*args):
  return subprocess.run(["git", "-C", REPO, *args], capture_output=True,
                        text=True, check=False).stdout.strip()


def test_run_info_records_every_invocation(tmp_path):
  config = ml_collections.ConfigDict(dict(seed=0, steps=10))
  workdir = str(tmp_path / "run")
  runs.prepare_workdir(workdir, config, None)
  config.steps = 10  # the same experiment: a resume
  runs.prepare_workdir(workdir, config, None, ignore=("steps",))
  info = json.loads((tmp_path / "run" / runs.RUN_INFO).read_text())
  first, second = info["invocations"]
  assert first["started"] <= second["started"]
  assert second["command"] == [sys.executable] + sys.argv
  assert second["python"] == ".".join(map(str, sys.version_info[:3]))
  assert second["packages"] == {name: versions.installed_version(name)
                                for name in runs.STACK}
  assert second["packages"]["tensorflow"] == "2.15.1"
  assert set(second["cpu"]["flags"]) == set(runs.CPU_FLAGS)
  assert second["gpus"] == [] and second["precision"] == "fp32"
  assert second["deterministic"] is False
  assert second["cwd"] == os.getcwd() and second["hostname"]
  if _git("rev-parse", "--show-toplevel"):  # a checkout
    assert second["git"]["commit"] == _git("rev-parse", "HEAD")
    assert second["git"]["dirty"] == bool(
        _git("status", "--porcelain", "--untracked-files=no"))
  assert sorted(os.listdir(workdir)) == ["config.json", runs.RUN_INFO]


def test_run_info_outside_a_checkout_and_with_an_unreadable_record(
    tmp_path, monkeypatch):
  monkeypatch.setattr(runs, "_CODE_ROOT", str(tmp_path))  # no checkout
  assert runs.git_state() is None
  path = tmp_path / runs.RUN_INFO
  path.write_text("{half")
  invocations = runs.record_run_info(str(tmp_path))
  assert len(invocations) == 1 and invocations[0]["git"] is None
  assert (tmp_path / (runs.RUN_INFO + ".unreadable")).read_text() == "{half"
  assert json.loads(path.read_text())["invocations"] == invocations


# -- Install metadata ------------------------------------------------------------


def _setup_kwargs():
  with mock.patch.object(setuptools, "setup") as setup:
    namespace = {"__name__": "__main__", "__file__": "setup.py"}
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
      exec(compile(f.read(), "setup.py", "exec"), namespace)  # pylint: disable=exec-used
  return setup.call_args.kwargs


def test_supported_python_agrees_everywhere():
  kwargs = _setup_kwargs()
  with open(os.path.join(REPO, "BUILD.md"), encoding="utf-8") as f:
    build = f.read()
  (stated,) = re.findall(r"^Python (3\.\d+) only\.", build, re.M)
  assert kwargs["python_requires"] == f"=={stated}.*"
  minors = [c.rsplit(" ", 1)[1] for c in kwargs["classifiers"]
            if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
  assert minors == [stated]
  assert sys.version.startswith(stated + ".")  # the venv runs on it
  assert "3.9, 3.10 and 3.11" not in build  # the old, untrue statement
  assert kwargs["license"] == "Apache-2.0"
  assert ("License :: OSI Approved :: Apache Software License"
          in kwargs["classifiers"])
  with open(os.path.join(REPO, "LICENSE"), encoding="utf-8") as f:
    assert "Apache License" in f.read(200)
  assert not any(r.startswith("imageio") for r in kwargs["install_requires"])


def test_every_console_script_imports_and_is_callable(tmp_path):
  scripts = _setup_kwargs()["entry_points"]["console_scripts"]
  targets = dict(re.fullmatch(r"([\w-]+) = ([\w.]+):(\w+)", s).groups()[:2]
                 for s in scripts)
  assert {"i2a-collect", "i2a-pretrain", "i2a-train", "i2a-evaluate",
          "i2a-launch", "i2a-plan", "i2a-sweep", "i2a-demo",
          "i2a-evaluate-models"} <= set(targets)
  # One process (the binaries' flags would clash in one FlagValues: each
  # binary's own flags are removed before the next is imported).
  code = (
      "import importlib, inspect, json, sys\n"
      "from absl import flags\n"
      "specs = json.loads(sys.argv[1])\n"
      "for spec in specs:\n"
      "  module_name, function = spec.split(':')\n"
      "  module = importlib.import_module(module_name)\n"
      "  entry = getattr(module, function)\n"
      "  assert callable(entry), spec\n"
      "  assert not [p for p in inspect.signature(entry).parameters.values()\n"
      "              if p.default is p.empty], spec\n"
      "  for flag in flags.FLAGS.get_flags_for_module(module_name):\n"
      "    delattr(flags.FLAGS, flag.name)\n"
      "  print(spec)\n")
  specs = [s.split(" = ")[1] for s in scripts]
  result = subprocess.run([sys.executable, "-c", code, json.dumps(specs)],
                          cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=400, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.split() == specs
