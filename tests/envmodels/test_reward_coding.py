"""The reward head's coding (envmodels/reward_coding.py, networks.RewardHead):
what it cannot represent, the scale 'auto' derives, and what is refused."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf

from envmodels import networks, reward_coding
from i2a.replay import episodes

# Primitive rewards of the games the presets train on.
MINIPACMAN = (0.1, -0.1, -5.0, -10.0, -20.0, 1.0, 2.0, 5.0)
CLIPPED = (-1.0, 0.0, 1.0)
MSPACMAN = (0.0, 10.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1600.0)


def chunk_sums(primitive, jump):
  """Every sum of `jump` primitive rewards, as float32 window rewards are
  made (float64 sums of float32 values, cast to float32)."""
  values = np.asarray(primitive, np.float32).astype(np.float64)
  sums = [np.sum(combo) for combo in
          itertools.combinations_with_replacement(values, jump)]
  return np.asarray(sums, np.float64).astype(np.float32)


def assert_round_trips(rewards, scale, bits):
  decoded = reward_coding.round_trip(rewards, scale, bits)
  np.testing.assert_allclose(decoded, rewards, rtol=1e-6,
                             atol=1e-4 / scale)
  assert not reward_coding.miscoded(rewards, scale, bits)


def test_the_old_mspacman_scale_codes_small_rewards_as_zero():
  head = networks.RewardHead(8, 0.1)
  rewards = tf.constant([1.0, 3.0, 5.0, -1.0, 10.0, 50.0])
  np.testing.assert_array_equal(head.decode(head.encode(rewards)).numpy(),
                                [0.0, 0.0, 0.0, 0.0, 10.0, 50.0])
  # round_trip runs the head's own ops.
  np.testing.assert_array_equal(
      reward_coding.round_trip(rewards.numpy(), 0.1, 8),
      head.decode(head.encode(rewards)).numpy())


def test_decode_of_a_hard_code_is_the_expected_reward_of_sure_bits():
  head = networks.RewardHead(6, 10.0)
  rewards = tf.constant([0.0, 0.1, -0.5, 2.0, -6.3])
  code = head.encode(rewards)
  sure_logits = 40.0 * (2.0 * code - 1.0)  # sigmoid -> the code's bits
  np.testing.assert_allclose(head.expected_reward(sure_logits).numpy(),
                             head.decode(code).numpy(), rtol=1e-6)
  np.testing.assert_allclose(head.decode(code).numpy(), rewards.numpy(),
                             rtol=1e-6)


@pytest.mark.parametrize("primitive, jump, expected_scale, bits", [
    (MINIPACMAN, 1, 10.0, 8),
    # Every sum of 3, -20 * 3 = -60 included: 600 codes need 10 bits.
    (MINIPACMAN, 3, 10.0, 10),
    (CLIPPED, 1, 1.0, 8),
    (CLIPPED, 3, 1.0, 8),
    (MSPACMAN, 1, 0.1, 8),
    (MSPACMAN[:3], 3, 0.1, 8),  # dots and pills summed over a chunk
])
def test_auto_derives_a_scale_under_which_every_reward_round_trips(
    primitive, jump, expected_scale, bits):
  rewards = chunk_sums(primitive, jump)
  scale = reward_coding.resolve_scale(rewards, "auto", bits=bits)
  assert scale == pytest.approx(expected_scale)
  assert reward_coding.bits_needed(rewards, scale) <= bits
  assert_round_trips(rewards, scale, bits)


def test_auto_codes_mspacman_chunks_with_a_ghost_in_8_bits():
  dots = chunk_sums((0.0, 10.0, 50.0), 3)
  rewards = np.unique(np.concatenate(
      [dots + np.float32(bonus) for bonus in MSPACMAN]))
  assert rewards.max() == 1750.0
  scale = reward_coding.resolve_scale(rewards, "auto", bits=8)
  assert scale == pytest.approx(0.1)
  assert reward_coding.bits_needed(rewards, scale) == 8
  assert_round_trips(rewards, scale, 8)


def test_auto_reads_the_window_rewards_of_long_episodes():
  """Through WindowSampler: MiniPacman-like steps (0.1, -0.1, 0, -4.9,
  -9.9; -19.9 at the end) over long episodes, jump 3: the window targets
  are float32 sums like -9.799999 and -9.8, all coded by scale 10."""
  rng = np.random.default_rng(0)
  primitive = np.float32([0.1, -0.1, 0.0, -4.9, -9.9])
  eps = []
  for length in (3000, 2500):
    reward = rng.choice(primitive, length, p=[0.3, 0.3, 0.36, 0.02, 0.02])
    reward[0], reward[-1] = 0.0, -19.9
    eps.append(episodes.Episode(
        observation=np.zeros((length, 8, 8, 3), np.uint8),
        action=np.zeros(length, np.int32), reward=reward.astype(np.float32),
        discount=np.ones(length, np.float32), complete=True))
  sampler = episodes.WindowSampler(eps, length=13, jump=3)
  rewards = sampler.distinct_rewards(3)
  scale = reward_coding.resolve_scale(rewards, "auto", bits=10)
  assert scale == pytest.approx(10.0)
  assert_round_trips(rewards, scale, 10)


def test_derive_scale_takes_the_coarsest_common_grid():
  assert reward_coding.derive_scale([0.1, 0.25]) == pytest.approx(20.0)
  assert reward_coding.derive_scale([1 / 3, -2 / 3]) == pytest.approx(3.0)
  assert reward_coding.derive_scale([200.0, 400.0]) == pytest.approx(0.005)
  assert reward_coding.derive_scale([0.0]) == 1.0
  assert reward_coding.derive_scale([]) == 1.0
  noise = np.random.default_rng(0).normal(size=20).astype(np.float32)
  assert reward_coding.derive_scale(noise) is None


def test_a_scale_that_cannot_code_the_rewards_is_refused_with_the_values():
  rewards = np.float32([0.0, 1.0, 3.0, 5.0, -1.0, 10.0])
  with pytest.raises(reward_coding.RewardCodingError) as error:
    reward_coding.resolve_scale(rewards, 0.1, 8, what="training rewards")
  message = str(error.value)
  assert "cannot code 4 of the 6 distinct training rewards" in message
  assert "reward_scale=0.1 with reward_bits=8" in message
  for value in ("-1 -> 0", "1 -> 0", "3 -> 0", "5 -> 0"):
    assert value in message
  assert ("reward_scale=1 with reward_bits=8 codes all 6 of them, as does "
          "reward_scale='auto'") in message
  assert isinstance(error.value, ValueError)


def test_overflowing_bits_are_refused_with_the_bits_that_suffice():
  rewards = chunk_sums(MSPACMAN, 1)
  with pytest.raises(ValueError, match=r"1600 -> 150 \(overflow\)") as error:
    reward_coding.resolve_scale(rewards, "auto", bits=4)
  message = str(error.value)
  assert "reward_scale='auto' (derived scale 0.1) with reward_bits=4" in message
  assert "reward_scale=0.1 with reward_bits=8 codes all 8 of them" in message
  # A numeric scale: the same check.
  with pytest.raises(ValueError, match="reward_bits=9 codes all 2"):
    reward_coding.resolve_scale([10.0, 2600.0], 0.1, 8)
  assert reward_coding.resolve_scale([10.0, 2600.0], "0.1", 9) == 0.1


def test_rewards_on_no_grid_are_refused_by_auto():
  noise = np.random.default_rng(1).normal(size=20).astype(np.float32)
  with pytest.raises(ValueError, match="'auto' found no scale.*No "
                     "reward_scale codes them all"):
    reward_coding.resolve_scale(noise, "auto", 8)


@pytest.mark.parametrize("given, expected", [
    ("auto", "auto"), ("AUTO", "auto"), ("0.1", 0.1), (10, 10.0),
    (np.float32(0.5), 0.5)])
def test_parse_scale(given, expected):
  assert reward_coding.parse_scale(given) == expected


@pytest.mark.parametrize("given", ["tenth", 0, -1.0, float("nan"), True, None])
def test_parse_scale_refuses_what_is_not_a_positive_number(given):
  with pytest.raises(ValueError, match="reward_scale must be 'auto' or a "
                     "positive number"):
    reward_coding.parse_scale(given)
