"""Tests of codeagent_rl.models.sampler."""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl import jit_cache
from codeagent_rl.models import sampler as sampler_lib
from codeagent_rl.models import transformer as tf
from tests.helpers import models

CFG = models.transformer_config(vocab_size=40, init_std=0.5)
GREEDY = sampler_lib.SamplerConfig(
  temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=6
)
PAD = 0
ACTOR = tf.Actor(CFG)
# Reference forwards, jitted: eager flax applies dispatch op by op and made
# this file slow; one compile per sequence length is cheaper.
APPLY = jax.jit(ACTOR.apply)


@pytest.fixture(scope="module")
def params():
  valid = jnp.ones((1, 4), bool)
  return ACTOR.init(
    jax.random.PRNGKey(0),
    jnp.zeros((1, 4), jnp.int32),
    tf.positions_from_valid(valid),
    valid,
  )


def prompts():
  """Two ragged prompts, right-padded: lengths 5 and 3."""
  tokens = jnp.array([[5, 6, 7, 8, 9], [11, 12, 13, 0, 0]], jnp.int32)
  valid = jnp.arange(5)[None] < jnp.array([[5], [3]])
  return tokens, valid


def reference_greedy(params, prompt, n):
  """Greedy decoding by full forward passes, no cache, one row."""
  seq = list(prompt)
  out = []
  for _ in range(n):
    toks = jnp.array([seq], jnp.int32)
    valid = jnp.ones_like(toks, bool)
    logits, _ = APPLY(params, toks, tf.positions_from_valid(valid), valid)
    nxt = int(jnp.argmax(logits[0, -1]))
    out.append(nxt)
    seq.append(nxt)
  return out


def test_greedy_equals_stepwise_argmax_of_full_forwards(params):
  sampler = sampler_lib.Sampler(ACTOR, CFG, GREEDY, pad_id=PAD)
  tokens, valid = prompts()
  state = sampler.start(batch=2, max_len=16)
  state = sampler.extend(params, state, tokens, valid)
  state, out = sampler.decode(
    params,
    state,
    jax.random.PRNGKey(0),
    jnp.array([6, 6]),
    jnp.array([-1]),
  )
  np.testing.assert_array_equal(out.lengths, [6, 6])
  assert not np.any(out.stopped)
  for row, prompt in enumerate([[5, 6, 7, 8, 9], [11, 12, 13]]):
    assert list(np.asarray(out.tokens[row])) == reference_greedy(
      params, prompt, 6
    )
  # Log-probs are those of the full forward at each step.
  seq = jnp.array([[5, 6, 7, 8, 9] + list(np.asarray(out.tokens[0]))])
  v = jnp.ones_like(seq, bool)
  logits, _ = APPLY(params, seq, tf.positions_from_valid(v), v)
  logp = jax.nn.log_softmax(logits[0, 4:10], -1)
  want = jnp.take_along_axis(logp, seq[0, 5:11, None], -1)[:, 0]
  np.testing.assert_allclose(out.log_probs[0], want, atol=1e-5)


def test_per_row_stops_and_budgets(params):
  tokens, valid = prompts()
  sampler = sampler_lib.Sampler(ACTOR, CFG, GREEDY, pad_id=PAD)
  state = sampler.extend(params, sampler.start(2, 16), tokens, valid)
  free = reference_greedy(params, [5, 6, 7, 8, 9], 6)
  # Row 0 stops on its own 3rd greedy token; row 1 has a budget of 2 and a
  # stop id it never emits.
  stop_ids = jnp.array([[free[2], -1], [39, 38]])
  stop_ids = jnp.where(
    jnp.isin(stop_ids[1], jnp.array(reference_greedy(params, [11, 12, 13], 2))),
    -1,
    stop_ids,
  )
  state, out = sampler.decode(
    params, state, jax.random.PRNGKey(0), jnp.array([6, 2]), stop_ids
  )
  first_stop = free.index(free[2]) + 1
  np.testing.assert_array_equal(out.lengths, [first_stop, 2])
  np.testing.assert_array_equal(out.stopped, [True, False])
  assert np.all(np.asarray(out.tokens[0, first_stop:]) == PAD)
  assert np.all(np.asarray(out.tokens[1, 2:]) == PAD)
  assert np.all(np.asarray(out.log_probs[1, 2:]) == 0)
  # Loop exits when all rows are done: only max(lengths) slots were used.
  assert int(state.cache.index) == 5 + max(first_stop, 2)


def test_zero_budget_row_produces_nothing(params):
  tokens, valid = prompts()
  sampler = sampler_lib.Sampler(ACTOR, CFG, GREEDY, pad_id=PAD)
  state = sampler.extend(params, sampler.start(2, 16), tokens, valid)
  _, out = sampler.decode(
    params, state, jax.random.PRNGKey(0), jnp.array([0, 3]), jnp.array([-1])
  )
  np.testing.assert_array_equal(out.lengths, [0, 3])
  assert np.all(np.asarray(out.tokens[0]) == PAD)


def test_incremental_prefill_equals_whole_prefill(params):
  # Turn 1: prompt + generated; turn 2: a ragged observation appended.
  sampler = sampler_lib.Sampler(ACTOR, CFG, GREEDY, pad_id=PAD)
  tokens, valid = prompts()
  state = sampler.extend(params, sampler.start(2, 24), tokens, valid)
  state, out = sampler.decode(
    params, state, jax.random.PRNGKey(0), jnp.array([3, 3]), jnp.array([-1])
  )
  obs = jnp.array([[0, 0, 21, 22], [23, 24, 25, 26]], jnp.int32)
  obs_valid = jnp.array([[False, False, True, True], [True] * 4])  # left-pad
  state = sampler.extend(params, state, obs, obs_valid)
  for row, (prompt, obs_row) in enumerate(
    [([5, 6, 7, 8, 9], [21, 22]), ([11, 12, 13], [23, 24, 25, 26])]
  ):
    seq = prompt + list(np.asarray(out.tokens[row, :3])) + obs_row
    toks = jnp.array([seq])
    v = jnp.ones_like(toks, bool)
    logits, _ = APPLY(params, toks, tf.positions_from_valid(v), v)
    np.testing.assert_allclose(state.last_logits[row], logits[0, -1], atol=2e-5)
    assert int(state.next_pos[row]) == len(seq)


def test_cache_overflow_is_refused_with_a_clear_error(params):
  sampler = sampler_lib.Sampler(ACTOR, CFG, GREEDY, pad_id=PAD)
  tokens, valid = prompts()
  state = sampler.extend(params, sampler.start(2, 8), tokens, valid)
  with pytest.raises(ValueError, match="KV cache has 8 slots, 5 used"):
    sampler.decode(
      params,
      state,
      jax.random.PRNGKey(0),
      jnp.array([4, 2]),
      jnp.array([-1]),
    )


def test_filters():
  logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
  top2 = sampler_lib._filter_logits(logits, 2, 1.0)
  assert np.all(np.asarray(top2[0, :2]) > -1e9)
  assert np.all(np.asarray(top2[0, 2:]) < -1e29)
  # top_p = 0.7: 0.5 alone is below 0.7, so 0.3 joins; 0.15 does not.
  nucleus = sampler_lib._filter_logits(logits, 0, 0.7)
  np.testing.assert_array_equal(
    np.asarray(nucleus[0]) > -1e9, [True, True, False, False]
  )
  nucleus = sampler_lib._filter_logits(logits, 0, 0.81)
  np.testing.assert_array_equal(
    np.asarray(nucleus[0]) > -1e9, [True, True, True, False]
  )


def test_sampling_follows_the_distribution():
  probs = np.array([0.5, 0.3, 0.15, 0.05])
  logits = jnp.broadcast_to(jnp.log(jnp.array(probs)), (20000, 4))
  cfg = sampler_lib.SamplerConfig(
    temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=1
  )
  toks, logp = sampler_lib.sample_token(logits, jax.random.PRNGKey(3), cfg)
  freq = np.bincount(np.asarray(toks), minlength=4) / 20000
  np.testing.assert_allclose(freq, probs, atol=0.015)
  np.testing.assert_allclose(np.exp(logp), probs[np.asarray(toks)], rtol=1e-5)
  # top_k=2 renormalises over the two best tokens.
  cfg = dataclasses.replace(cfg, top_k=2)
  toks, _ = sampler_lib.sample_token(logits, jax.random.PRNGKey(4), cfg)
  freq = np.bincount(np.asarray(toks), minlength=4) / 20000
  np.testing.assert_allclose(freq, [0.625, 0.375, 0, 0], atol=0.015)
  # High temperature flattens; it is reflected in the returned log-probs.
  cfg = dataclasses.replace(cfg, top_k=0, temperature=100.0)
  _, logp = sampler_lib.sample_token(logits, jax.random.PRNGKey(5), cfg)
  np.testing.assert_allclose(np.exp(logp), 0.25, atol=0.01)


def test_sampled_decode_is_reproducible_and_traces_once(params):
  chex.clear_trace_counter()
  # Samplers of equal settings share their jitted steps; this one's start
  # without the shapes earlier tests compiled.
  jit_cache.clear()
  cfg = sampler_lib.SamplerConfig(
    temperature=1.0, top_k=10, top_p=0.9, max_new_tokens=5
  )
  sampler = sampler_lib.Sampler(ACTOR, CFG, cfg, pad_id=PAD)
  tokens, valid = prompts()
  results = []
  for seed in (7, 7, 8):
    state = sampler.extend(params, sampler.start(2, 16), tokens, valid)
    _, out = sampler.decode(
      params,
      state,
      jax.random.PRNGKey(seed),
      jnp.array([5, 5]),
      jnp.array([-1]),
    )
    results.append(np.asarray(out.tokens))
  np.testing.assert_array_equal(results[0], results[1])
  # One layout of the state, one compile of each step.
  assert len(sampler._steps) == 1
  extend_fn, decode_fn = next(iter(sampler._steps.values()))
  assert decode_fn._cache_size() == 1
  assert extend_fn._cache_size() == 1


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("temperature", -1.0, "temperature=-1.0"),
    ("top_p", 0.0, "top_p=0.0"),
    ("top_k", -2, "top_k=-2"),
    ("max_new_tokens", 0, "max_new_tokens=0"),
  ],
)
def test_config_validation(field, value, match):
  with pytest.raises(ValueError, match=match):
    dataclasses.replace(GREEDY, **{field: value})


def test_a_chunked_model_prefills_only_the_last_logits(params):
  """With `logits_chunk` a prefill heads only each row's last position.

  The same logits and greedy turn, and no [B, C, V] array in the compiled
  step.
  """
  chunked_cfg = dataclasses.replace(CFG, logits_chunk=4)
  chunked = tf.Actor(chunked_cfg)
  states, outs = [], []
  for model, cfg in ((ACTOR, CFG), (chunked, chunked_cfg)):
    sampler = sampler_lib.Sampler(model, cfg, GREEDY, pad_id=PAD)
    state = sampler.extend(params, sampler.start(2, 16), *prompts())
    states.append(np.asarray(state.last_logits))
    state, out = sampler.decode(
      params, state, jax.random.PRNGKey(1), jnp.array([4, 4]), jnp.array([1])
    )
    outs.append(np.asarray(out.tokens))
  np.testing.assert_allclose(states[1], states[0], rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(outs[1], outs[0])

  big = dataclasses.replace(CFG, vocab_size=151_936)
  tokens = jax.ShapeDtypeStruct((2, 2048), jnp.int32)
  valid = jax.ShapeDtypeStruct((2, 2048), bool)

  def temp_bytes(cfg):
    model = tf.Actor(cfg)
    variables = jax.eval_shape(
      lambda: model.init(
        jax.random.PRNGKey(0),
        jnp.zeros((1, 1), jnp.int32),
        jnp.zeros((1, 1), jnp.int32),
        jnp.ones((1, 1), bool),
      )
    )
    state = jax.eval_shape(lambda: sampler_lib.empty_state(cfg, 2, 2048))
    step = jax.jit(functools.partial(sampler_lib.extend, model=model))
    compiled = step.lower(variables, state, tokens, valid).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  logits_bytes = 2 * 2048 * 151_936 * 4  # [B, C, V] float32: 2.5 GB
  assert temp_bytes(big) > logits_bytes
  assert temp_bytes(dataclasses.replace(big, logits_chunk=512)) < (
    logits_bytes / 4
  )


def test_parts_of_a_batch_sample_what_the_whole_batch_samples(params):
  """One process's rows of a lockstep batch (multi-host) draw its tokens.

  A batch's key draws noise for all of its rows; a part draws the same
  noise and keeps its rows, so two halves decoded apart give the tokens of
  the whole batch decoded at once.
  """
  cfg = sampler_lib.SamplerConfig(
    temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=5
  )
  sampler = sampler_lib.Sampler(ACTOR, CFG, cfg, pad_id=PAD)
  tokens, valid = prompts()
  tokens = jnp.concatenate([tokens, tokens[::-1]])
  valid = jnp.concatenate([valid, valid[::-1]])
  key = jax.random.PRNGKey(11)

  def decode(rows, part):
    state = sampler.extend(
      params, sampler.start(len(rows), 16), tokens[rows], valid[rows]
    )
    _, out = sampler.decode(
      params, state, key, jnp.full((len(rows),), 5), jnp.array([-1]), part
    )
    return np.asarray(out.tokens)

  whole = decode(np.arange(4), None)
  halves = [decode(np.arange(2), sampler_lib.BatchPart(0, 4))]
  halves.append(decode(np.arange(2, 4), sampler_lib.BatchPart(2, 4)))
  np.testing.assert_array_equal(np.concatenate(halves), whole)
  # Without the part, a half draws other noise: the test can fail.
  assert not np.array_equal(decode(np.arange(2, 4), None), whole[2:])
  with pytest.raises(ValueError, match=r"start must be in \[0, total\)"):
    sampler_lib.BatchPart(4, 4)
