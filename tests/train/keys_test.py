"""Keys from one root: no two keys of a run meet, and seeds differ everywhere.

`run_keys` lists every key a run draws, named by where it is used, with
more epochs and minibatches than the arithmetic the keys used to be built
with could keep apart (`1000 + epoch * 100 + m` met itself at m = 100;
`key(seed + 1)` of seed 0 was `key(seed + 2)`... of another seed).
"""

import jax
import numpy as np
import pytest

from codeagent_rl.train import keys

SFT_STEPS = 3
ITERATIONS = 3
EPOCHS = 2
MINIBATCHES = 101  # past 100, where epoch e's minibatch 100 met e + 1's 0
EVAL_SAMPLES = 2
EVAL_STARTS = (0, 64, 100_003)  # sample 1 at 0 met sample 0 at 100_003


def _data(key: jax.Array) -> bytes:
  return np.asarray(jax.random.key_data(key)).tobytes()


def _eval_keys(name: str, rng: jax.Array) -> dict[str, jax.Array]:
  return {
    f"{name}/sample{k}/start{start}": keys.eval_sample(rng, k, start)
    for k in range(EVAL_SAMPLES)
    for start in EVAL_STARTS
  }


def run_keys(seed: int) -> dict[str, jax.Array]:
  """Every key of a run with `seed`, by where it is used."""
  out = {"sft/init": keys.sft_init(seed)}
  out.update({f"sft/step{s}": keys.sft_step(seed, s) for s in range(SFT_STEPS)})
  out.update(_eval_keys("sft_eval", keys.sft_eval(seed)))
  out.update(_eval_keys("eval_job", keys.eval_job(seed)))
  out["ppo/init"] = keys.ppo_init(seed)
  for k in range(ITERATIONS):
    for name, key in keys.value_pretrain(seed, k).items():
      out[f"value_pretrain/{k}/{name}"] = key
  for it in range(ITERATIONS):
    it_keys = keys.ppo_iteration(seed, it)
    out[f"ppo/it{it}/rollout"] = it_keys["rollout"]
    out.update(_eval_keys(f"ppo/it{it}/eval", it_keys["eval"]))
    update = it_keys["update"]
    for e in range(EPOCHS):
      out[f"ppo/it{it}/epoch{e}"] = keys.epoch(update, e)
      for m in range(MINIBATCHES):
        out[f"ppo/it{it}/epoch{e}/mb{m}"] = keys.minibatch(update, e, m)
  return out


def _collisions(named: dict[str, jax.Array]) -> list[tuple[str, str]]:
  seen, clashes = {}, []
  for name, key in named.items():
    data = _data(key)
    if data in seen:
      clashes.append((seen[data], name))
    seen[data] = name
  return clashes


@pytest.fixture(scope="module")
def seed0():
  return run_keys(0)


def test_no_two_keys_of_a_run_meet(seed0):
  assert len(seed0) > ITERATIONS * EPOCHS * MINIBATCHES
  assert _collisions(seed0) == []


def test_seeds_differ_in_every_stream(seed0):
  seed1 = run_keys(1)
  assert seed0.keys() == seed1.keys()
  both = {f"0:{k}": v for k, v in seed0.items()}
  both.update({f"1:{k}": v for k, v in seed1.items()})
  assert _collisions(both) == []


def test_the_streams_are_named_and_stable():
  # Appended streams leave the keys of the others as they were.
  assert keys.STREAMS == (
    "sft",
    "sft_eval",
    "ppo",
    "eval_job",
    "value_pretrain",
  )
  assert _data(keys.ppo(3)) == _data(keys.stream(3, "ppo"))
  assert _data(keys.sft_eval(3)) == _data(keys.stream(3, "sft_eval"))
  with pytest.raises(ValueError, match="no key stream 'critic'"):
    keys.stream(0, "critic")


def test_in_jit_keys_equal_eager_ones():
  """The epoch function derives its keys under jit from traced indices."""
  update = keys.ppo_iteration(0, 5)["update"]
  traced = jax.jit(keys.minibatch)(update, np.int32(1), np.int32(7))
  assert _data(traced) == _data(keys.minibatch(update, 1, 7))
  traced = jax.jit(keys.epoch)(update, np.int32(1))
  assert _data(traced) == _data(keys.epoch(update, 1))
