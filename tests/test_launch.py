"""`python -m i2a.launch`: processes, faults, and authenticated weights.

The weights tests run a Reverb server in this process. The launch tests run
real processes on loopback (tiny MiniPacman preset: 2 envs x 3-step unrolls,
one unroll per update); each process imports TensorFlow, so the launch
tests take tens of seconds and all but one are in the slow lane.
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from agents import variables as variables_lib
from agents.variables import VariableClient, VariablePublisher
from i2a import io_utils
from i2a.metrics import read_column
from i2a.replay import tables
from i2a.run import launch as launching

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = b"k" * 32
OTHER_KEY = b"o" * 32


# -- Authenticated weights -----------------------------------------------------

def _variables(value=0.0):
  return [tf.Variable(np.full([3, 4], value, np.float32)),
          tf.Variable(np.full([2], value, np.float32))]


@pytest.fixture
def weights_server():
  server = tables.start_server([tables.variables_table(
      variables_lib.signature(_variables()))])
  yield server
  server.stop()


def _values(variables):
  return [v.numpy().copy() for v in variables]


def _insert(client, item):
  client.insert(item, {tables.VARIABLES: 1.0})


def test_weights_signed_with_another_key_are_refused(weights_server):
  client = weights_server.localhost_client()
  VariablePublisher(client, _variables(1.0), key=OTHER_KEY).publish(3)
  mine = _variables(0.0)
  variable_client = VariableClient(client, mine, key=KEY)
  assert not variable_client.update()
  assert variable_client.refusals_by_reason["bad_tag"] == 1
  assert variable_client.learner_step == -1
  for value in _values(mine):
    np.testing.assert_array_equal(value, 0.0)  # kept its weights


def test_altered_weights_are_refused(weights_server):
  client = weights_server.localhost_client()
  item = variables_lib.flatten(3, _variables(1.0), key=KEY, generation=1)
  item[variables_lib.VARIABLES][1][0] = 666.0  # after signing
  _insert(client, item)
  variable_client = VariableClient(client, _variables(0.0), key=KEY)
  assert not variable_client.update()
  assert variable_client.refusals == 1
  assert dict(variable_client.refusals_by_reason) == {"bad_tag": 1}
  # Relabelling authentic weights as newer breaks the tag too.
  item = variables_lib.flatten(3, _variables(1.0), key=KEY, generation=1)
  item[variables_lib.STEP] = np.int64(4)
  _insert(client, item)
  assert not variable_client.update()
  assert variable_client.refusals_by_reason["bad_tag"] == 2


def test_weights_without_a_tag_are_refused():
  unauthenticated = variables_lib.signature(_variables(),
                                            authenticated=False)
  server = tables.start_server([tables.variables_table(unauthenticated)])
  try:
    client = server.localhost_client()
    _insert(client, {variables_lib.STEP: np.int64(7),
                     variables_lib.VARIABLES: tuple(_values(_variables(1.)))})
    mine = _variables(0.0)
    variable_client = VariableClient(client, mine, key=KEY)
    assert not variable_client.update()
    assert not variable_client.update()
    assert dict(variable_client.refusals_by_reason) == {"missing_tag": 2}
    for value in _values(mine):
      np.testing.assert_array_equal(value, 0.0)
    # The old layout still reads, and a publisher refuses such a table.
    sample = next(client.sample(tables.VARIABLES, emit_timesteps=False))
    assert variables_lib.unflatten(sample.data, mine)[0] == 7
    with pytest.raises(ValueError, match="without the `generation` and `tag`"):
      VariablePublisher(client, _variables(), key=KEY).publish(8)
  finally:
    server.stop()


def test_replayed_older_weights_are_refused_and_a_restarted_learner_is_taken(
    weights_server):
  client = weights_server.localhost_client()
  learner = _variables(1.0)
  publisher = VariablePublisher(client, learner, key=KEY, generation=5)
  old = variables_lib.flatten(3, learner, key=KEY, generation=5)
  mine = _variables(0.0)
  variable_client = VariableClient(client, mine, key=KEY)
  for variable in learner:
    variable.assign(variable + 1.0)  # 2.0 at step 9
  publisher.publish(9)
  assert variable_client.update()
  assert variable_client.version == (5, 9)
  assert not variable_client.update()  # the same weights: nothing newer
  assert variable_client.refusals == 0
  _insert(client, old)  # an eavesdropper replays the authentic step 3
  assert not variable_client.update()
  assert dict(variable_client.refusals_by_reason) == {"replayed": 1}
  for value in _values(mine):
    np.testing.assert_array_equal(value, 2.0)
  # A learner restarted from an older checkpoint has a newer generation.
  for variable in learner:
    variable.assign(variable * 0 + 7.0)
  VariablePublisher(client, learner, key=KEY, generation=6).publish(4)
  assert variable_client.update()
  assert variable_client.version == (6, 4)
  for value in _values(mine):
    np.testing.assert_array_equal(value, 7.0)


def test_the_weights_key_comes_from_the_environment(monkeypatch):
  monkeypatch.delenv(variables_lib.KEY_ENV, raising=False)
  with pytest.raises(ValueError, match="I2A_WEIGHTS_KEY is not set"):
    variables_lib.key_from_environment(required=True)
  assert variables_lib.key_from_environment(required=False) is None
  # The embedded mode: one random key per process.
  assert variables_lib.default_key() == variables_lib.default_key()
  assert len(variables_lib.default_key()) == 32
  monkeypatch.setenv(variables_lib.KEY_ENV, "short")
  with pytest.raises(ValueError, match="at least 16"):
    variables_lib.key_from_environment()
  monkeypatch.setenv(variables_lib.KEY_ENV, "s" * 20)
  assert variables_lib.key_from_environment() == b"s" * 20
  assert variables_lib.default_key() == b"s" * 20


def test_children_get_the_launchers_config_arguments():
  argv = ["--config=configs/agents/a2c.py:tiny", "--num_actors=3",
          "--config.seed=4", "--workdir", "/w", "--config.loss.discount",
          "0.9", "--role=", "--config", "other.py"]
  assert launching.config_arguments(argv) == [
      "--config=configs/agents/a2c.py:tiny", "--config.seed=4",
      "--config.loss.discount", "0.9", "--config", "other.py"]


# -- Processes -----------------------------------------------------------------

TINY = ["--config=configs/agents/a2c.py:tiny", "--config.env_steps=100000000",
        "--config.log_every=10", "--config.checkpoint_every=40",
        "--config.plot_every=1000000", "--config.eval_every=120"]


def _env(**extra):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  env.pop(variables_lib.KEY_ENV, None)
  env.update(extra)
  return env


def _start(arguments, output, env):
  with open(output, "ab") as out:
    return subprocess.Popen(
        [sys.executable, "-m", "i2a.launch"] + arguments, cwd=ROOT, env=env,
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _tail(path, chars=4000):
  if not os.path.exists(path):
    return f"({path} does not exist)"
  with open(path, errors="replace") as f:
    return f.read()[-chars:]


def _wait_for(condition, timeout_s, what, *logs):
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    value = condition()
    if value:
      return value
    time.sleep(0.25)
  details = "\n".join(f"--- {path}\n{_tail(path)}" for path in logs)
  pytest.fail(f"timed out after {timeout_s}s waiting for {what}\n{details}")


def _logged_steps(workdir):
  """The learner steps in metrics.csv (complete lines only)."""
  path = os.path.join(workdir, "metrics.csv")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    lines = f.read().split("\n")[1:-1]
  return [int(float(line.split(",", 1)[0])) for line in lines if line]


def _last_step(workdir):
  steps = _logged_steps(workdir)
  return steps[-1] if steps else 0


def _processes(workdir):
  path = os.path.join(workdir, "logs", launching.PROCESSES)
  try:
    return io_utils.read_json(path)["processes"]
  except (FileNotFoundError, ValueError):
    return {}


def _latest_checkpoint_step(workdir):
  latest = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
  return int(latest.rsplit("-", 1)[-1]) if latest else 0


def _stopped_step(workdir):
  """The step of the learner's last 'learner stopped at learner step N'."""
  log = _tail(os.path.join(workdir, "logs", "learner.log"), 100_000)
  marker = "learner stopped at learner step "
  assert marker in log, log[-3000:]
  return int(log.rsplit(marker, 1)[1].split()[0])


def _alive(pid):
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().split(")")[-1].split()[0] != "Z"
  except FileNotFoundError:
    return False


def _descendants_of_launcher(launcher_pid):
  """Live processes started by the launcher (its pid in their environment)."""
  marker = f"{launching.LAUNCHER_PID_ENV}={launcher_pid}".encode()
  found = []
  for name in os.listdir("/proc"):
    if not name.isdigit():
      continue
    try:
      with open(f"/proc/{name}/environ", "rb") as f:
        if marker in f.read().split(b"\0") and _alive(int(name)):
          found.append(int(name))
    except OSError:
      continue
  return found


def _stop(launch, timeout_s=90):
  launch.send_signal(signal.SIGTERM)
  return launch.wait(timeout=timeout_s)


def test_a_launch_trains_survives_an_actor_kill_and_stops_cleanly(tmp_path):
  workdir, output = str(tmp_path / "run"), str(tmp_path / "launch.out")
  launch = _start(TINY + [f"--workdir={workdir}", "--num_actors=2"], output,
                  _env())
  logs = (output,)
  try:
    _wait_for(lambda: _latest_checkpoint_step(workdir) >= 40, 120,
              "a checkpoint", *logs)
    actor = _processes(workdir)["actor-0"]
    os.kill(actor["pid"], signal.SIGKILL)
    killed_at = _last_step(workdir)
    _wait_for(lambda: _last_step(workdir) >= killed_at + 30, 60,
              "training to go on after the actor's death", *logs)
    restarted = _wait_for(
        lambda: (_processes(workdir)["actor-0"]["pid"] != actor["pid"]
                 and _processes(workdir)["actor-0"]), 30,
        "the launcher to restart the actor", *logs)
    assert restarted["restarts"] == 1 and restarted["running"]
    assert restarted["exit_codes"] == [-signal.SIGKILL]
    assert _processes(workdir)["actor-1"]["restarts"] == 0
  finally:
    code = _stop(launch)
  assert code == 0, _tail(output)
  assert not _descendants_of_launcher(launch.pid)
  for process in _processes(workdir).values():
    assert not _alive(process["pid"])
  # The learner's final checkpoint holds its last step.
  stopped_at = _stopped_step(workdir)
  assert stopped_at >= _last_step(workdir) >= killed_at + 30
  assert _latest_checkpoint_step(workdir) == stopped_at
  for name in ("config.json", "protocol.json", "learner.json"):
    assert os.path.exists(os.path.join(workdir, name)), name
  assert not [n for n in os.listdir(os.path.join(workdir, "checkpoints"))
              if n.endswith(".tmp")]
  # The learner evaluated every 120 consumed env steps (20 updates).
  evaluated = read_column(os.path.join(workdir, "eval.csv"), "env_steps")
  assert evaluated is not None and len(evaluated) >= 1
  assert all(steps % 120 == 0 for steps in evaluated), evaluated


@pytest.mark.slow  # a long end-to-end run (the A2C launch tests stay fast)
def test_an_i2a_with_stored_rollouts_trains_across_processes(tmp_path):
  """The I2A with the emulator oracle: actor processes run the rollouts
  from their environments and the learner process reads them from the
  unrolls (side inputs crossing gRPC)."""
  workdir, output = str(tmp_path / "run"), str(tmp_path / "launch.out")
  launch = _start(["--config=configs/agents/i2a.py:tiny",
                   "--config.network.model=oracle",
                   "--config.env_steps=100000000", "--config.log_every=2",
                   "--config.checkpoint_every=1000",
                   "--config.plot_every=1000000", f"--workdir={workdir}",
                   "--num_actors=1"], output, _env())
  try:
    _wait_for(lambda: _last_step(workdir) >= 6, 180, "six learner steps",
              output)
  finally:
    code = _stop(launch)
  assert code == 0, _tail(output)
  cross_entropy = read_column(os.path.join(workdir, "metrics.csv"),
                              "auxiliary/distillation_cross_entropy")
  assert len(cross_entropy) >= 3 and np.all(np.isfinite(cross_entropy))


@pytest.mark.slow
def test_a_killed_learner_is_restarted_and_resumes_its_step_count(tmp_path):
  workdir, output = str(tmp_path / "run"), str(tmp_path / "launch.out")
  launch = _start(TINY + [f"--workdir={workdir}", "--num_actors=1"], output,
                  _env())
  learner_log = os.path.join(workdir, "logs", "learner.log")
  try:
    _wait_for(lambda: _latest_checkpoint_step(workdir) >= 40, 120,
              "a checkpoint", output)
    first_generation = io_utils.read_json(
        os.path.join(workdir, "learner.json"))["generation"]
    os.kill(_processes(workdir)["learner"]["pid"], signal.SIGKILL)
    checkpoint = _latest_checkpoint_step(workdir)
    _wait_for(lambda: _processes(workdir)["learner"]["restarts"] == 1, 30,
              "the launcher to restart the learner", output)
    _wait_for(lambda: f"ckpt-{checkpoint}" in _tail(learner_log, 20000), 90,
              "the learner to resume", output)
    _wait_for(lambda: _last_step(workdir) >= checkpoint + 20, 60,
              "the resumed learner to train", output)
  finally:
    code = _stop(launch)
  assert code == 0, _tail(output)
  steps = _logged_steps(workdir)
  # Rows past the checkpoint from before the kill were dropped on resume.
  assert steps == sorted(steps) and len(set(steps)) == len(steps)
  assert steps[-1] >= checkpoint + 20
  assert io_utils.read_json(os.path.join(
      workdir, "learner.json"))["generation"] > first_generation
  assert _processes(workdir)["actor-0"]["restarts"] == 0
  assert not _descendants_of_launcher(launch.pid)


@pytest.mark.slow
def test_roles_started_alone_train_together_and_survive_a_learner_restart(
    tmp_path):
  """The multi-host recipe on loopback: server, learner, actors by --role."""
  import portpicker  # pylint: disable=import-outside-toplevel
  port = portpicker.pick_unused_port()
  address = f"--reverb_address=localhost:{port}"
  workdir = str(tmp_path / "run")
  out = {name: str(tmp_path / f"{name}.out")
         for name in ("server", "learner", "actor", "nokey")}
  env = _env(I2A_WEIGHTS_KEY="a-shared-secret-of-some-length")
  nokey = _start(TINY + ["--role=learner", address, f"--workdir={workdir}"],
                 out["nokey"], _env())
  server = _start(TINY + ["--role=server", f"--port={port}"], out["server"],
                  env)
  learner = _start(TINY + ["--role=learner", address, f"--workdir={workdir}"],
                   out["learner"], env)
  actor = _start(TINY + ["--role=actor", address, "--rank=1"], out["actor"],
                 env)
  processes = [server, learner, actor]
  try:
    assert nokey.wait(timeout=120) != 0
    assert "I2A_WEIGHTS_KEY is not set" in _tail(out["nokey"])
    _wait_for(lambda: _latest_checkpoint_step(workdir) >= 40, 150,
              "a checkpoint", *out.values())
    assert learner.poll() is None and actor.poll() is None
    learner.send_signal(signal.SIGTERM)  # a final checkpoint, then exit
    assert learner.wait(timeout=60) == 0, _tail(out["learner"])
    marker = "learner stopped at learner step "
    stopped_at = int(_tail(out["learner"]).rsplit(marker, 1)[1].split()[0])
    assert _latest_checkpoint_step(workdir) == stopped_at
    assert stopped_at >= _last_step(workdir)
    generation = io_utils.read_json(os.path.join(
        workdir, "learner.json"))["generation"]
    learner = _start(TINY + ["--role=learner", address,
                             f"--workdir={workdir}"], out["learner"], env)
    processes[1] = learner
    _wait_for(lambda: _last_step(workdir) >= stopped_at + 40, 120,
              "the restarted learner to train on the same actor",
              *out.values())
    assert actor.poll() is None  # it survived the learner's restart
    new_generation = io_utils.read_json(os.path.join(
        workdir, "learner.json"))["generation"]
    assert new_generation > generation
    # The actor took the restarted learner's weights (its progress lines
    # come every 10 s).
    _wait_for(lambda: f"generation={new_generation}" in _tail(out["actor"]),
              40, "the actor to take the new weights", out["actor"])
    assert "refusals=0" in _tail(out["actor"], 300)
  finally:
    for process in reversed(processes):
      if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    for process in processes:
      process.wait(timeout=60)
  assert _logged_steps(workdir)[-1] >= stopped_at + 40


@pytest.mark.slow
def test_no_child_outlives_a_launcher_killed_with_sigkill(tmp_path):
  workdir, output = str(tmp_path / "run"), str(tmp_path / "launch.out")
  launch = _start(TINY + [f"--workdir={workdir}", "--num_actors=1"], output,
                  _env())
  try:
    _wait_for(lambda: _latest_checkpoint_step(workdir) >= 40, 120,
              "a checkpoint", output)
  finally:
    launch.kill()
    launch.wait()
  # The children get SIGTERM (PR_SET_PDEATHSIG); the learner, whose server
  # is gone too, checkpoints where it is blocked and exits.
  _wait_for(lambda: not _descendants_of_launcher(launch.pid), 60,
            "the children to exit", output)
  assert _latest_checkpoint_step(workdir) == _stopped_step(workdir)


def test_a_refused_launch_writes_nothing_into_the_workdir(tmp_path):
  """The learner's checks run (--role=check) before the launcher writes
  logs/: a workdir holding another run is refused and left as it was."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "config.json").write_text('{"agent": "another run"}')
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  result = subprocess.run(
      [sys.executable, "-m", "i2a.launch",
       "--config=configs/agents/a2c.py:tiny", f"--workdir={workdir}",
       "--num_actors=1"], cwd=ROOT, env=env, capture_output=True, text=True,
      timeout=300, check=False)
  assert result.returncode == 1, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  assert "error: workdir" in result.stderr
  assert "holds a run with a different config" in result.stderr
  assert sorted(os.listdir(workdir)) == ["config.json"]
