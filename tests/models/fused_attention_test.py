"""`model.attention="fused"`: `jax.nn.dot_product_attention` where it applies.

On a GPU the kernel is cuDNN's (bfloat16); on this CPU the same call with
the "xla" implementation checks what can be checked here: that our masking
is translated into the kernel's causal-plus-length mask exactly, that rows
it cannot express (left padding, all padding, shifted positions, packed
segments) go to the chunked implementation, that values and gradients
equal plain attention's at every query a loss reads, and that a PPO update
of a model whose attention goes through the kernel's call is plain's.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.models import attention
from codeagent_rl.models import transformer as tf
from codeagent_rl.parallel import sharding
from codeagent_rl.train import steps
from tests.models import attention_test as base  # its PPO batch and update

ON_GPU = jax.default_backend() == "gpu"
# cuDNN runs only bfloat16 / float16; on a CPU, float32 and tight bounds.
IMPL, DTYPE = ("cudnn", jnp.bfloat16) if ON_GPU else ("xla", jnp.float32)
TOL = {"atol": 0.05} if ON_GPU else {"rtol": 2e-5, "atol": 2e-6}
GRAD_TOL = {"atol": 0.1} if ON_GPU else {"rtol": 1e-4, "atol": 1e-5}


def _rows(kind, b=3, t=24):
  valid = np.ones((b, t), bool)
  if kind == "right_padded":
    valid[0, t - 7 :] = False
    valid[2, 5:] = False
  elif kind == "left_padded":
    valid[1, :4] = False
  elif kind == "blind_row":
    valid[1] = False
  positions = tf.positions_from_valid(jnp.asarray(valid))
  if kind == "shifted":  # valid tokens first, but positions start at 3
    positions = positions + 3
  return jnp.asarray(valid), jnp.asarray(positions, jnp.int32)


def test_which_rows_the_kernels_mask_expresses():
  expected = {
    "causal": True,
    "right_padded": True,
    "left_padded": False,
    "blind_row": False,
    "shifted": False,
  }
  for kind, want in expected.items():
    valid, positions = _rows(kind)
    assert bool(attention.index_ordered(positions, valid)) is want, kind


@pytest.mark.parametrize(
  "kind", ["causal", "right_padded", "left_padded", "blind_row", "shifted"]
)
@pytest.mark.parametrize("groups", [1, 3])
def test_fused_equals_plain_where_a_loss_reads(kind, groups):
  rng = np.random.default_rng(groups)
  valid, pos = _rows(kind)
  q, k, v = base._qkv(3, 24, 2, groups, 16, rng, DTYPE)  # noqa: SLF001
  # Padding queries are read by no loss; the fallback equals plain there too.
  reads = valid if bool(attention.index_ordered(pos, valid)) else None
  mask = jnp.ones(valid.shape, bool) if reads is None else reads
  weights = jnp.asarray(rng.standard_normal(q.shape), jnp.float32)
  weights = weights * mask[:, :, None, None, None]

  def plain(q, k, v):
    return attention.plain(q, k, v, pos, pos, valid)

  def fused(q, k, v):
    return attention.fused(q, k, v, pos, valid, implementation=IMPL, chunk=8)

  want = plain(q, k, v).astype(jnp.float32)
  got = jax.jit(fused)(q, k, v).astype(jnp.float32)
  assert got.shape == want.shape
  np.testing.assert_allclose(
    got * mask[:, :, None, None, None],
    want * mask[:, :, None, None, None],
    **TOL,
  )

  def loss(f):
    return lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32) * weights)

  want_g = jax.grad(loss(plain), (0, 1, 2))(q, k, v)
  got_g = jax.jit(jax.grad(loss(fused), (0, 1, 2)))(q, k, v)
  for g, w in zip(got_g, want_g, strict=True):
    np.testing.assert_allclose(
      g.astype(jnp.float32), w.astype(jnp.float32), **GRAD_TOL
    )


def test_without_a_kernel_or_with_segments_fused_is_chunked():
  rng = np.random.default_rng(5)
  valid, pos = _rows("right_padded")
  q, k, v = base._qkv(3, 24, 2, 2, 16, rng, DTYPE)  # noqa: SLF001
  segments = jnp.where(jnp.arange(24)[None] < 10, 1, 2) * valid
  chunked = attention.chunked(q, k, v, pos, pos, valid, segments, segments, 8)
  packed = attention.attend("fused", 8, q, k, v, pos, pos, valid, segments)
  np.testing.assert_array_equal(packed, chunked)
  if not ON_GPU:
    assert attention.fused_kernel(jnp.bfloat16) is None
    got = attention.attend("fused", 8, q, k, v, pos, pos, valid, None)
    want = attention.chunked(q, k, v, pos, pos, valid, chunk=8)
    np.testing.assert_array_equal(got, want)
  # float32 has no cuDNN kernel on any platform.
  assert attention.fused_kernel(jnp.float32) is None


def test_a_cache_prefill_never_uses_the_kernel():
  assert attention.for_cache("fused", 600, 512) == "chunked"
  assert attention.for_cache("fused", 12, 512) == "plain"
  assert attention.for_cache("chunked", 12, 512) == "chunked"


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_a_ppo_update_through_the_kernel_is_the_same_update(monkeypatch, role):
  # The model picks the platform's kernel; a CPU has none, so the "xla"
  # implementation of the same call stands in for it (also on a GPU: these
  # rows are float32, which cuDNN does not take).
  monkeypatch.setattr(attention, "fused_kernel", lambda dtype: "xla")
  batch = base._ppo_batch(1)  # noqa: SLF001 (right-padded rows)
  positions = tf.positions_from_valid(batch.valid)
  assert bool(attention.index_ordered(positions, batch.valid))
  cls = tf.Actor if role == "actor" else tf.Critic
  step = (
    functools.partial(steps.actor_step, temperature=0.9, vocab_limit=base.VOCAB)
    if role == "actor"
    else steps.critic_step
  )
  plain_model = cls(base._cfg("plain"))  # noqa: SLF001
  params = sharding.unbox(
    plain_model.init(jax.random.key(2), batch.tokens, positions, batch.valid)[
      "params"
    ]
  )
  if role == "critic":  # a non-zero head, so the trunk moves too
    head = params["value_head"]["kernel"]
    params["value_head"]["kernel"] = 0.1 * jnp.ones_like(head)
  want, want_m = base._update(step, plain_model, params, batch)  # noqa: SLF001
  fused_model = cls(base._cfg("fused"))  # noqa: SLF001
  got, got_m = base._update(step, fused_model, params, batch)  # noqa: SLF001
  base._assert_same_update(got, got_m, want, want_m)  # noqa: SLF001
