"""envmodels.export / envmodels.load: the export format and its errors.

Round trips for every kind (including in a fresh process) are in
test_conformance.py; these tests check the format itself, atomic writing and
the `ExportError` for each way a directory can be unusable.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil

import numpy as np
import pytest

import envmodels
import tensorflow as tf
from envmodels import state_space

# `envmodels.export` the attribute is the function; this is the module.
export_module = importlib.import_module("envmodels.export")

FRAME = (16, 16, 3)


def make_model(kind: str = "sssm", action_free: bool = False):
  spec = envmodels.EnvModelSpec(kind=kind, observation_shape=FRAME,
                                num_actions=5, jump=1, context_length=3,
                                action_free=action_free)
  return envmodels.build(spec,
                         **state_space.StateSpaceModel.tiny_hyperparameters())


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """A pristine export; tests copy it before damaging it."""
  path = tmp_path_factory.mktemp("pristine") / "export"
  envmodels.export(make_model(), str(path))
  return path


@pytest.fixture
def export_copy(exported, tmp_path):
  path = tmp_path / "export"
  shutil.copytree(exported, path)
  return path


def read_spec(path):
  return json.loads((path / "spec.json").read_text())


def write_spec(path, data):
  (path / "spec.json").write_text(json.dumps(data))


# -- The format ----------------------------------------------------------------


def test_spec_json_records_format_spec_and_hyperparameters(exported):
  data = read_spec(exported)
  assert data["format"] == "envmodels.export"
  assert data["format_version"] == envmodels.FORMAT_VERSION
  assert data["kind"] == "sssm"
  assert envmodels.EnvModelSpec.from_json(data["spec"]) == make_model().spec
  assert data["hyperparameters"] == make_model().hyperparameters
  assert os.path.exists(exported / (data["variables"] + ".index"))


def test_load_needs_no_config_and_returns_a_frozen_model(exported):
  model = envmodels.load(exported)  # a Path works too
  assert model.spec.kind == "sssm"
  assert model.trainable_variables == ()
  assert model.variables


def test_load_seed_sets_the_rollout_noise(exported):
  context = np.zeros((1, 3) + FRAME, np.uint8)
  actions = np.zeros((1, 2, 1), np.int32)
  features = {}
  for name, seed in (("a", 1), ("b", 2), ("a_again", 1)):
    model = envmodels.load(exported, seed=seed)
    features[name] = model.rollout(model.initial_state(context),
                                   actions).features.numpy()
  np.testing.assert_array_equal(features["a"], features["a_again"])
  assert not np.allclose(features["a"], features["b"])


def test_export_replaces_an_existing_export_and_leaves_no_temporary_files(
    tmp_path):
  path = tmp_path / "export"
  envmodels.export(make_model(), str(path))
  envmodels.export(make_model("dssm_det"), str(path))
  assert read_spec(path)["kind"] == "dssm_det"
  assert sorted(os.listdir(tmp_path)) == ["export"]


def test_failed_export_keeps_the_previous_export_intact(tmp_path, monkeypatch):
  path = tmp_path / "export"
  envmodels.export(make_model(), str(path))

  def failing_write(file_path, text):
    raise OSError("disk full (simulated)")

  monkeypatch.setattr(export_module, "_write_file", failing_write)
  with pytest.raises(OSError, match="simulated"):
    envmodels.export(make_model("dssm_det"), str(path))
  assert read_spec(path)["kind"] == "sssm"
  assert sorted(os.listdir(tmp_path)) == ["export"]
  envmodels.load(path)


def test_export_refuses_to_overwrite_a_foreign_directory(tmp_path):
  (tmp_path / "notes.txt").write_text("mine")
  with pytest.raises(envmodels.ExportError, match="not an envmodel export"):
    envmodels.export(make_model(), str(tmp_path))
  assert os.listdir(tmp_path) == ["notes.txt"]


def test_export_refuses_a_model_with_an_attached_imagination_prior(tmp_path):
  model = make_model(action_free=True)
  model.create_variables()
  model.attach_imagination_prior(seed=0)
  with pytest.raises(envmodels.ExportError, match="imagination prior"):
    envmodels.export(model, str(tmp_path / "export"))


# -- Load errors ---------------------------------------------------------------


def test_export_error_is_a_value_error():
  assert issubclass(envmodels.ExportError, ValueError)


def test_missing_directory_raises_export_error(tmp_path):
  with pytest.raises(envmodels.ExportError, match="does not exist"):
    envmodels.load(tmp_path / "nowhere")


def test_foreign_directory_raises_export_error(tmp_path):
  (tmp_path / "saved_model.pb").write_bytes(b"\x00")
  with pytest.raises(envmodels.ExportError,
                     match="not an envmodel export.*saved_model.pb"):
    envmodels.load(tmp_path)


def test_foreign_spec_json_raises_export_error(tmp_path):
  (tmp_path / "spec.json").write_text(json.dumps({"name": "something else"}))
  with pytest.raises(envmodels.ExportError,
                     match="not an envmodel export.*format"):
    envmodels.load(tmp_path)


def test_missing_spec_json_raises_export_error(export_copy):
  os.remove(export_copy / "spec.json")
  with pytest.raises(envmodels.ExportError, match="missing spec.json"):
    envmodels.load(export_copy)


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", ""])
def test_corrupt_spec_json_raises_export_error(export_copy, content):
  (export_copy / "spec.json").write_text(content)
  with pytest.raises(envmodels.ExportError,
                     match="corrupt|not an envmodel export"):
    envmodels.load(export_copy)


def test_corrupt_spec_field_raises_export_error(export_copy):
  data = read_spec(export_copy)
  del data["spec"]["num_actions"]
  write_spec(export_copy, data)
  with pytest.raises(envmodels.ExportError, match="corrupt.*'spec'"):
    envmodels.load(export_copy)


def test_newer_format_version_raises_export_error_saying_to_upgrade(
    export_copy):
  data = read_spec(export_copy)
  data["format_version"] = envmodels.FORMAT_VERSION + 1
  write_spec(export_copy, data)
  with pytest.raises(envmodels.ExportError) as error:
    envmodels.load(export_copy)
  message = str(error.value)
  assert f"format version {envmodels.FORMAT_VERSION + 1}" in message
  assert f"versions {envmodels.FORMAT_VERSION}" in message
  assert "Upgrade the package" in message


def test_unknown_kind_raises_export_error_listing_known_kinds(export_copy):
  data = read_spec(export_copy)
  data["spec"]["kind"] = "from_the_future"
  write_spec(export_copy, data)
  with pytest.raises(envmodels.ExportError, match="known kinds: .*sssm"):
    envmodels.load(export_copy)


def test_mismatched_hyperparameters_raise_export_error(export_copy):
  data = read_spec(export_copy)
  data["hyperparameters"]["state_channels"] = 16
  write_spec(export_copy, data)
  with pytest.raises(envmodels.ExportError, match="do not match"):
    envmodels.load(export_copy)


def test_missing_variables_raise_export_error(export_copy):
  shutil.rmtree(export_copy / "variables")
  with pytest.raises(envmodels.ExportError, match="missing its variables"):
    envmodels.load(export_copy)


def test_corrupt_variables_raise_export_error(export_copy):
  variables = export_copy / "variables"
  for name in os.listdir(variables):
    if "data" in name:
      (variables / name).write_bytes(b"garbage")
  with pytest.raises(envmodels.ExportError, match="corrupt"):
    envmodels.load(export_copy)


def test_non_finite_weights_are_neither_exported_nor_loaded(tmp_path):
  spec = envmodels.EnvModelSpec(kind="dssm_det", observation_shape=(16, 24, 3),
                                num_actions=5, jump=1, context_length=3)
  model = envmodels.build(
      spec, seed=0, **envmodels.model_class("dssm_det").tiny_hyperparameters())
  model.create_variables()
  path = envmodels.export(model, str(tmp_path / "good"))
  variable = [v for v in model.variables if v.dtype.is_floating][0]
  variable.assign(np.full(variable.shape, np.nan, np.float32))
  with pytest.raises(envmodels.ExportError, match="refusing to export"):
    envmodels.export(model, str(tmp_path / "bad"))
  # An export damaged after the fact (e.g. written by an older version).
  checkpoint = tf.train.Checkpoint(model=model)
  checkpoint.write(os.path.join(path, "variables", "variables"))
  with pytest.raises(envmodels.ExportError, match="NaN or infinite weights"):
    envmodels.load(path)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_an_export_has_the_usual_permissions_under_the_umask(tmp_path, umask):
  """Not the private 0o700 of its temporary directory: 0o777 / 0o666 less
  the umask, for the directory and every file in it."""
  model = make_model()
  previous = os.umask(umask)
  try:
    path = envmodels.export(model, str(tmp_path / "export"))
  finally:
    os.umask(previous)
  assert os.stat(path).st_mode & 0o777 == 0o777 & ~umask
  files = [os.path.join(root, name) for root, _, names in os.walk(path)
           for name in names]
  assert files
  for name in files:
    assert os.stat(name).st_mode & 0o777 == 0o666 & ~umask, name


# -- Identity: provenance and fingerprint --------------------------------------

def test_provenance_goes_into_spec_json_and_old_exports_have_none(tmp_path,
                                                                  exported):
  path = tmp_path / "export"
  record = {"data": {"fingerprint": "abc"}, "protocol": {"env_id": "X"}}
  envmodels.export(make_model(), str(path), provenance=record)
  assert read_spec(path)["provenance"] == record
  assert envmodels.provenance(path) == record
  assert "provenance" not in read_spec(exported)
  assert envmodels.provenance(exported) == {}  # unknown


def test_the_fingerprint_is_the_content_of_spec_and_variables(exported,
                                                               export_copy,
                                                               tmp_path):
  fingerprint = envmodels.fingerprint(exported)
  assert len(fingerprint) == 64
  assert envmodels.fingerprint(export_copy) == fingerprint  # a copy
  data = read_spec(export_copy)
  (export_copy / "spec.json").write_text(json.dumps(data, indent=7))
  assert envmodels.fingerprint(export_copy) == fingerprint  # whitespace
  other = tmp_path / "other"
  tf.random.set_seed(1)  # not the seed every test (and `exported`) starts at
  envmodels.export(make_model(), str(other))  # same spec, new weights
  assert envmodels.fingerprint(other) != fingerprint
  data["hyperparameters"]["note"] = 1
  write_spec(export_copy, data)
  assert envmodels.fingerprint(export_copy) != fingerprint


@pytest.mark.parametrize("where", ["format_version", "spec.version"])
def test_a_string_format_version_is_a_clear_export_error(export_copy, where):
  data = read_spec(export_copy)
  if where == "format_version":
    data["format_version"] = "1"
  else:
    data["spec"]["version"] = "1"
  write_spec(export_copy, data)
  with pytest.raises(envmodels.ExportError,
                     match=r"is corrupt: .*version must be .* found '1'"):
    envmodels.load(export_copy)


def test_a_kind_mismatch_is_a_short_message_naming_both_kinds(export_copy):
  other = make_model("dssm_det")
  data = read_spec(export_copy)  # the variables are an sssm's
  data["kind"] = data["spec"]["kind"] = "dssm_det"
  data["hyperparameters"] = json.loads(json.dumps(other.hyperparameters))
  write_spec(export_copy, data)
  with pytest.raises(envmodels.ExportError) as error:
    envmodels.load(export_copy)
  message = str(error.value)
  assert len(message) < 1000, len(message)
  assert "kind 'dssm_det', expected by spec.json" in message
  assert "the variables were written by scope(s) ['sssm']" in message
  assert "export the model again" in message
