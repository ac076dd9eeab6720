"""`python -m i2a.launch --backend=ray`: roles as Ray actors on a local cluster.

Everything on loopback: each launch starts its own Ray cluster on 127.0.0.1
(usage statistics off) and shuts it down; every test checks that no process
of it is left (the driver's descendants, collected while it ran, and
anything naming the test's directory). The reconnection logic
(`distributed.ServerWatch`) is tested against in-process Reverb servers.
Launches import TensorFlow in every role process (tiny MiniPacman preset):
one A2C launch is in the fast lane, the faults and the I2A in the slow one.
"""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import portpicker
import psutil
import pytest
import reverb
import tensorflow as tf

from i2a import io_utils
from i2a.metrics import read_column
from i2a.replay import tables
from i2a.run import distributed
from i2a.run import launch as launching

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--config=configs/agents/a2c.py:tiny", "--config.log_every=10",
        "--config.checkpoint_every=40", "--config.plot_every=1000000",
        "--config.eval_every=0"]


# -- Flags and the optional dependency -------------------------------------------

def _launch_output(arguments, **env):
  result = subprocess.run(
      [sys.executable, "-m", "i2a.launch"] + arguments, cwd=ROOT,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env),
      capture_output=True, text=True, timeout=120, check=False)
  return result.returncode, result.stdout + result.stderr


def test_without_ray_the_ray_backend_says_what_to_install(tmp_path):
  # A `ray` package that fails to import stands for Ray missing.
  fake = tmp_path / "fake" / "ray"
  fake.mkdir(parents=True)
  (fake / "__init__.py").write_text("raise ImportError('No module named ray')")
  code, output = _launch_output(
      TINY + ["--backend=ray", f"--workdir={tmp_path / 'run'}"],
      PYTHONPATH=f"{fake.parent}{os.pathsep}{ROOT}")
  assert code != 0
  assert "--backend=ray needs Ray, which is not installed" in output, output
  assert "pip install -e .[ray]" in output
  assert not (tmp_path / "run" / "logs").exists()  # refused before writing


def test_ray_flags_that_do_not_fit_are_refused(tmp_path):
  workdir = f"--workdir={tmp_path / 'run'}"
  code, output = _launch_output(TINY + ["--backend=ray", "--role=actors",
                                        "--reverb_address=localhost:1",
                                        workdir])
  assert code != 0 and "--backend=ray runs every role itself" in output
  code, output = _launch_output(TINY + ["--backend=ray", workdir,
                                        "--reverb_address=localhost:1"])
  assert code != 0 and "drop --reverb_address" in output
  code, output = _launch_output(TINY + ["--ray_address=auto", workdir])
  assert code != 0 and "--ray_address=auto needs --backend=ray" in output


def test_which_ends_of_a_role_ray_restarts():
  from i2a.run import ray_backend  # imports no Ray
  restarts = ray_backend.restarts_after
  for role in ("server", "actor"):  # any end but a requested stop
    assert restarts(role, -signal.SIGKILL, stopping=False)
    assert restarts(role, 0, stopping=False)
    assert restarts(role, 1, stopping=False)
    assert not restarts(role, -signal.SIGTERM, stopping=True)
  assert restarts("learner", -signal.SIGKILL, stopping=False)
  assert restarts("learner", distributed.EXIT_SERVER_LOST, stopping=False)
  assert not restarts("learner", 0, stopping=False)  # training done
  assert not restarts("learner", 1, stopping=False)  # an error
  assert not restarts("learner", -signal.SIGKILL, stopping=True)
  assert ray_backend.EXIT_SERVER_LOST == distributed.EXIT_SERVER_LOST


# -- Losing the server (in-process Reverb servers) ----------------------------------

def _server(port):
  signature = {"x": tf.TensorSpec([2], tf.float32)}
  return reverb.Server([
      tables.unrolls_table(signature, max_size=10),
      tables.variables_table(signature)], port=port)


def _insert(client, table, count):
  for _ in range(count):
    client.insert([np.ones(2, np.float32)], {table: 1.0})


def test_backoff_doubles_up_to_its_cap():
  assert [distributed.backoff_s(a, 0.5, 4.0) for a in range(6)] == [
      0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


@pytest.mark.parametrize("unrolls_per_item", [1, 4])
def test_server_watch_counts_a_loss_a_restart_and_the_unrolls_lost(
    capsys, unrolls_per_item):
  # Three items in the queue: 3 unrolls, or 12 of items of 4 unrolls.
  lost = 3 * unrolls_per_item
  port = portpicker.pick_unused_port()
  address = f"localhost:{port}"
  server = _server(port)
  client = reverb.Client(address)
  restarts = []
  watch = distributed.ServerWatch(client, address, "learner",
                                  give_up_after_s=60,
                                  on_restart=lambda: restarts.append(1),
                                  timeout_s=1,
                                  unrolls_per_item=unrolls_per_item)
  _insert(client, tables.VARIABLES, 1)
  _insert(client, tables.UNROLLS, 3)
  assert watch.check() and watch.up
  assert watch.counts() == dict(server_losses=0, server_restarts=0,
                                reconnect_attempts=0, unrolls_lost=0)
  server.stop()
  assert watch.check()  # lost, but within give_up_after_s
  assert not watch.up and watch.losses == 1
  time.sleep(distributed.backoff_s(0) + 0.1)
  assert watch.check() and watch.attempts == 1  # one failed retry
  server = _server(port)  # the same address, fresh (empty) tables
  try:
    deadline = time.monotonic() + 30
    while not watch.up and time.monotonic() < deadline:
      watch.check()
      time.sleep(0.2)
    assert watch.up
    assert watch.counts() == dict(server_losses=1, server_restarts=1,
                                  reconnect_attempts=watch.attempts,
                                  unrolls_lost=lost)
    assert watch.attempts >= 1 and restarts == [1]
    output = capsys.readouterr().out
    assert "learner: lost the Reverb server at" in output
    assert "reconnection attempt 1 to the Reverb server" in output
    assert f"{lost} unrolls lost with its queue" in output
    # The same server answering again is no restart.
    _insert(client, tables.VARIABLES, 1)
    assert watch.check() and watch.check()
    assert watch.restarts == 1 and restarts == [1]
  finally:
    server.stop()


def test_server_watch_gives_up_after_its_bound():
  port = portpicker.pick_unused_port()
  address = f"localhost:{port}"
  server = _server(port)
  watch = distributed.ServerWatch(reverb.Client(address), address, "actor 0",
                                  give_up_after_s=1.0, timeout_s=1)
  assert watch.check()
  server.stop()
  assert watch.check()  # lost just now
  time.sleep(1.2)
  assert not watch.check()
  assert watch.losses == 1 and watch.restarts == 0


# -- Launches on a local Ray cluster --------------------------------------------------

def _tail(path, chars=6000):
  if not os.path.exists(path):
    return f"({path} does not exist)"
  with open(path, errors="replace") as f:
    return f.read()[-chars:]


class RayLaunch:
  """`python -m i2a.launch --backend=ray` as a child; remembers every
  process it started (for the leftover check)."""

  def __init__(self, arguments, tmp_path):
    self.workdir = str(tmp_path / "run")
    self.output = str(tmp_path / "launch.out")
    self.tmp_path = str(tmp_path)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               RAY_USAGE_STATS_ENABLED="0")
    env.pop(launching.KEY_ENV, None)
    with open(self.output, "ab") as out:
      self.popen = subprocess.Popen(
          [sys.executable, "-m", "i2a.launch", "--backend=ray",
           f"--workdir={self.workdir}"] + arguments, cwd=ROOT, env=env,
          stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    self.seen = {}  # pid -> create_time of every descendant seen

  def note_descendants(self):
    try:
      for child in psutil.Process(self.popen.pid).children(recursive=True):
        try:
          self.seen[child.pid] = child.create_time()
        except psutil.NoSuchProcess:
          pass
    except psutil.NoSuchProcess:
      pass

  def wait_for(self, condition, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
      self.note_descendants()
      value = condition()
      if value:
        return value
      if self.popen.poll() is not None:
        break
      time.sleep(0.5)
    pytest.fail(f"timed out after {timeout_s}s (or the launch exited: "
                f"{self.popen.poll()}) waiting for {what}\n"
                f"{_tail(self.output)}")

  def processes(self):
    try:
      return io_utils.read_json(os.path.join(
          self.workdir, "logs", launching.PROCESSES))["processes"]
    except (FileNotFoundError, ValueError):
      return {}

  def stop(self, timeout_s=120):
    if self.popen.poll() is None:
      self.note_descendants()
      self.popen.send_signal(signal.SIGTERM)
    return self.popen.wait(timeout=timeout_s)

  def leftovers(self):
    """Live processes this launch started, or naming its directory."""
    left = []
    for pid, created in self.seen.items():
      try:
        process = psutil.Process(pid)
        if process.create_time() == created and \
            process.status() != psutil.STATUS_ZOMBIE:
          left.append(f"{pid} {' '.join(process.cmdline())[:200]}")
      except psutil.NoSuchProcess:
        pass
    for process in psutil.process_iter(["pid", "cmdline"]):
      cmdline = " ".join(process.info["cmdline"] or [])
      if self.tmp_path in cmdline and process.info["pid"] != os.getpid():
        left.append(f"{process.info['pid']} {cmdline[:200]}")
    return left

  def cleanup(self):
    """Last resort after a failure: the processes this launch started."""
    if self.popen.poll() is None:
      self.popen.kill()
      self.popen.wait()
    for pid, created in self.seen.items():
      try:
        process = psutil.Process(pid)
        if process.create_time() == created:
          process.kill()
      except psutil.NoSuchProcess:
        pass


@pytest.fixture
def ray_launches():
  pytest.importorskip("ray")
  launches = []
  yield launches
  for launch in launches:
    launch.cleanup()


def _last_step(workdir):
  steps = read_column(os.path.join(workdir, "metrics.csv"), "step")
  return int(steps[-1]) if steps is not None and len(steps) else 0


def _latest_checkpoint_step(workdir):
  latest = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
  return int(latest.rsplit("-", 1)[-1]) if latest else 0


def test_a2c_trains_through_ray_checkpoints_and_leaves_nothing(
    tmp_path, ray_launches):
  launch = RayLaunch(TINY + ["--config.env_steps=300", "--num_actors=2"],
                     tmp_path)
  ray_launches.append(launch)
  launch.wait_for(lambda: launch.processes().get("actor-1", {}).get("pid"),
                  180, "the roles to start")
  code = launch.popen.wait(timeout=300)
  output = _tail(launch.output, 100_000)
  assert code == 0, output
  assert "the learner finished training" in output
  # Logs gathered with the role names, by Ray and per role on disk.
  for name in ("server", "learner", "actor-0", "actor-1"):
    assert f"({name} pid=" in output, name
    assert os.path.exists(os.path.join(launch.workdir, "logs",
                                       f"{name}.log")), name
  status = io_utils.read_json(os.path.join(launch.workdir, "logs",
                                           launching.PROCESSES))
  assert status["backend"] == "ray"
  assert status["reverb_address"].startswith("127.0.0.1:")
  assert {p["node"] for p in status["processes"].values()} == {"127.0.0.1"}
  assert status["processes"]["learner"]["exit_codes"] == [0]
  # 300 env steps = 50 updates of 6: the final checkpoint at 50.
  assert _latest_checkpoint_step(launch.workdir) == 50
  assert _last_step(launch.workdir) == 50
  assert not launch.leftovers()


@pytest.mark.slow
def test_ray_restarts_a_killed_actor_learner_and_server(tmp_path,
                                                         ray_launches):
  launch = RayLaunch(TINY + ["--config.env_steps=100000000",
                             "--num_actors=2"], tmp_path)
  ray_launches.append(launch)
  workdir = launch.workdir

  def restarted(name, old_pid):
    process = launch.processes().get(name, {})
    return process if process.get("pid") not in (None, old_pid) else None

  launch.wait_for(lambda: _latest_checkpoint_step(workdir) >= 40, 240,
                  "a first checkpoint")
  # An actor.
  actor = launch.processes()["actor-0"]
  os.kill(actor["pid"], signal.SIGKILL)
  again = launch.wait_for(lambda: restarted("actor-0", actor["pid"]), 120,
                          "Ray to restart actor-0")
  assert again["restarts"] == 1
  assert again["worker_pid"] != actor["worker_pid"]  # a new Ray actor
  step = _last_step(workdir)
  launch.wait_for(lambda: _last_step(workdir) >= step + 20, 120,
                  "training after the actor's restart")
  # The learner: it resumes from its newest checkpoint.
  learner = launch.processes()["learner"]
  checkpointed = _latest_checkpoint_step(workdir)
  os.kill(learner["pid"], signal.SIGKILL)
  launch.wait_for(lambda: restarted("learner", learner["pid"]), 120,
                  "Ray to restart the learner")
  launch.wait_for(lambda: _latest_checkpoint_step(workdir) > checkpointed,
                  180, "a checkpoint of the restarted learner")
  log = _tail(os.path.join(workdir, "logs", "learner.log"), 1_000_000)
  # Its step count is the checkpoint's (one written just before the kill
  # may be newer than the one read).
  resumed = re.findall(r"resumed from \S+ \(learner step (\d+),", log)
  assert len(resumed) == 1 and int(resumed[0]) >= checkpointed, log[-3000:]
  # The server: restarted on its address; the learner (not restarted)
  # reconnects, republishes and counts the unrolls lost.
  learner = launch.processes()["learner"]
  server = launch.processes()["server"]
  step = _last_step(workdir)
  os.kill(server["pid"], signal.SIGKILL)
  launch.wait_for(lambda: restarted("server", server["pid"]), 120,
                  "Ray to restart the server")
  server_file = os.path.join(workdir, distributed.SERVER_FILE)
  counts = launch.wait_for(
      lambda: os.path.exists(server_file) and io_utils.read_json(
          server_file).get("server_restarts") and io_utils.read_json(
              server_file), 120, "the learner to see the server's restart")
  assert counts["server_losses"] >= 1 and counts["server_restarts"] == 1
  assert counts["unrolls_lost"] >= 0
  launch.wait_for(lambda: _last_step(workdir) >= step + 20, 180,
                  "training after the server's restart")
  assert launch.processes()["learner"]["pid"] == learner["pid"]
  assert launch.processes()["server"]["restarts"] == 1
  assert launch.processes()["learner"]["restarts"] == 1
  # (The actors got weights again: the learner's publish in flight when
  # the server died was resent to the new one, or the learner republished.)
  code = launch.stop()
  output = _tail(launch.output, 100_000)
  assert code == 0, output
  # The final checkpoint holds the last step.
  assert _latest_checkpoint_step(workdir) >= _last_step(workdir) > step + 20
  assert not launch.leftovers()


@pytest.mark.slow
def test_an_i2a_trains_through_ray_and_checkpoints(tmp_path, ray_launches):
  launch = RayLaunch(["--config=configs/agents/i2a.py:tiny",
                      "--config.network.model=oracle",
                      "--config.env_steps=48", "--config.log_every=2",
                      "--config.checkpoint_every=4",
                      "--config.plot_every=1000000", "--config.eval_every=0",
                      "--num_actors=1"], tmp_path)
  ray_launches.append(launch)
  launch.wait_for(lambda: launch.processes().get("learner", {}).get("pid"),
                  180, "the roles to start")
  code = launch.popen.wait(timeout=400)
  assert code == 0, _tail(launch.output)
  cross_entropy = read_column(os.path.join(launch.workdir, "metrics.csv"),
                              "auxiliary/distillation_cross_entropy")
  assert len(cross_entropy) >= 3 and np.all(np.isfinite(cross_entropy))
  assert _latest_checkpoint_step(launch.workdir) == 8
  assert not launch.leftovers()
