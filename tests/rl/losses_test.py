"""Tests of codeagent_rl.rl.losses: hand cases, NumPy parity, accumulation."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codeagent_rl.models import token_stats
from codeagent_rl.rl import losses


def numpy_aggregate(loss, mask, mode, norm_length=None):
  mask = mask.astype(bool)
  rows = mask.any(axis=1)
  if mode == "token_mean":
    return (loss * mask).sum() / max(mask.sum(), 1)
  if mode == "seq_mean_token_mean":
    per = [
      (loss[i] * mask[i]).sum() / mask[i].sum() for i in np.flatnonzero(rows)
    ]
    return sum(per) / max(len(per), 1)
  per = [(loss[i] * mask[i]).sum() / norm_length for i in np.flatnonzero(rows)]
  return sum(per) / max(len(per), 1)


def random_batch(rng, b=6, t=9, v=None):
  mask = rng.random((b, t)) < 0.6
  mask[0] = False  # a row with nothing trainable
  mask[1, :] = True
  out = dict(
    logp=rng.normal(-1.0, 0.3, size=(b, t)).astype(np.float32),
    old_logp=rng.normal(-1.0, 0.3, size=(b, t)).astype(np.float32),
    advantages=rng.normal(size=(b, t)).astype(np.float32),
    values=rng.normal(size=(b, t)).astype(np.float32),
    old_values=rng.normal(size=(b, t)).astype(np.float32),
    returns=rng.normal(size=(b, t)).astype(np.float32),
    mask=mask,
  )
  if v is not None:
    out["logits"] = rng.normal(size=(b, t, v)).astype(np.float32)
    out["tokens"] = rng.integers(0, v, size=(b, t))
  return out


@pytest.mark.parametrize("mode", losses.AGG_MODES)
def test_aggregate_matches_numpy(mode):
  rng = np.random.default_rng(0)
  loss = rng.normal(size=(6, 9)).astype(np.float32)
  mask = rng.random((6, 9)) < 0.5
  mask[2] = False
  got = losses.aggregate(loss, mask, mode, norm_length=16.0)
  want = numpy_aggregate(loss, mask, mode, norm_length=16.0)
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_aggregate_hand_worked():
  loss = np.array([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]], np.float32)
  mask = np.array([[1, 1, 1], [1, 0, 0]], bool)
  # token_mean: (1+2+3+4)/4; seq means: (2 + 4)/2; sum/norm: (6/10+4/10)/2.
  assert float(losses.aggregate(loss, mask, "token_mean")) == pytest.approx(2.5)
  assert float(
    losses.aggregate(loss, mask, "seq_mean_token_mean")
  ) == pytest.approx(3.0)
  assert float(
    losses.aggregate(loss, mask, "seq_mean_token_sum_norm", norm_length=10)
  ) == pytest.approx(0.5)


def test_aggregate_errors():
  x = np.zeros((2, 3), np.float32)
  with pytest.raises(ValueError, match="unknown mode 'mean'"):
    losses.aggregate(x, x > 0, "mean")
  with pytest.raises(ValueError, match="norm_length"):
    losses.aggregate(x, x > 0, "seq_mean_token_sum_norm")


def test_empty_mask_gives_zero_not_nan():
  x = np.ones((2, 3), np.float32)
  for mode in losses.AGG_MODES:
    out = losses.aggregate(x, np.zeros((2, 3), bool), mode, norm_length=4.0)
    assert float(out) == 0.0


def test_policy_loss_hand_worked():
  # ratios e^{0.5}=1.6487, e^{-0.5}=0.6065, 1.0; eps 0.2 both sides.
  logp = np.array([[0.5, -0.5, 0.0, 0.5]], np.float32)
  old = np.zeros((1, 4), np.float32)
  adv = np.array([[1.0, 1.0, -2.0, -1.0]], np.float32)
  mask = np.array([[1, 1, 1, 1]], bool)
  loss, diag = losses.ppo_policy_loss(
    logp, old, adv, mask, eps_low=0.2, eps_high=0.2
  )
  # t0: A>0, ratio 1.65 -> clipped to 1.2: max(-1.65, -1.2) = -1.2 (clipped)
  # t1: A>0, ratio 0.61: max(-0.61, -0.8) = -0.6065 (unclipped)
  # t2: ratio 1: -(-2)*1 = 2
  # t3: A<0, ratio 1.65: max(1.65, 1.2) = 1.6487 (unclipped)
  per = [-1.2, -np.exp(-0.5), 2.0, np.exp(0.5)]
  np.testing.assert_allclose(loss, np.mean(per), rtol=1e-6)
  np.testing.assert_allclose(diag["clip_frac"], 0.25)


def test_asymmetric_clip_and_dual_clip():
  logp = np.log(np.array([[1.25, 1.25, 5.0]], np.float32))
  old = np.zeros((1, 3), np.float32)
  adv = np.array([[1.0, -1.0, -1.0]], np.float32)
  mask = np.ones((1, 3), bool)
  loss, diag = losses.ppo_policy_loss(
    logp, old, adv, mask, eps_low=0.2, eps_high=0.28, agg_mode="token_mean"
  )
  # eps_high = 0.28: ratio 1.25 is inside the range for A > 0 -> -1.25.
  # A<0: max(1.25, 1.25) = 1.25; t2: max(5, 1.2) = 5.
  np.testing.assert_allclose(loss, (-1.25 + 1.25 + 5.0) / 3, rtol=1e-6)
  loss, diag = losses.ppo_policy_loss(
    logp, old, adv, mask, eps_low=0.2, eps_high=0.28, dual_clip=3.0
  )
  # Dual clip caps t2 at -A * 3 = 3.
  np.testing.assert_allclose(loss, (-1.25 + 1.25 + 3.0) / 3, rtol=1e-6)
  np.testing.assert_allclose(diag["dual_clip_frac"], 1 / 3, rtol=1e-6)
  with pytest.raises(ValueError, match="dual_clip must be > 1"):
    losses.ppo_policy_loss(
      logp, old, adv, mask, eps_low=0.2, eps_high=0.2, dual_clip=0.5
    )


def test_policy_loss_matches_numpy_on_random_inputs():
  rng = np.random.default_rng(4)
  d = random_batch(rng)
  for mode in losses.AGG_MODES:
    loss, _ = losses.ppo_policy_loss(
      d["logp"],
      d["old_logp"],
      d["advantages"],
      d["mask"],
      eps_low=0.1,
      eps_high=0.3,
      dual_clip=2.0,
      agg_mode=mode,
      norm_length=12.0,
    )
    ratio = np.exp(d["logp"] - d["old_logp"])
    a = d["advantages"]
    per = np.maximum(-a * ratio, -a * np.clip(ratio, 0.9, 1.3))
    per = np.where(a < 0, np.minimum(per, -a * 2.0), per)
    want = numpy_aggregate(per, d["mask"], mode, norm_length=12.0)
    np.testing.assert_allclose(loss, want, rtol=1e-5)


def test_behaviour_weight_is_exactly_one_on_policy():
  # Staleness 0: behaviour = proximal log-probs, so loss, gradient and
  # diagnostics equal the plain loss's bit for bit.
  d = random_batch(np.random.default_rng(7))
  args = (d["old_logp"], d["advantages"], d["mask"])
  kw = dict(eps_low=0.2, eps_high=0.28, dual_clip=3.0)

  def plain(logp):
    return losses.ppo_policy_loss(logp, *args, **kw)

  def decoupled(logp):
    return losses.ppo_policy_loss(
      logp, *args, behaviour_logp=d["old_logp"], **kw
    )

  (l0, d0), g0 = jax.value_and_grad(plain, has_aux=True)(d["logp"])
  (l1, d1), g1 = jax.value_and_grad(decoupled, has_aux=True)(d["logp"])
  assert float(l0) == float(l1)
  np.testing.assert_array_equal(g0, g1)
  assert float(d1["behaviour_weight_mean"]) == 1.0
  assert float(d1["behaviour_cap_frac"]) == 0.0
  for k in d0:
    assert float(d0[k]) == float(d1[k])


def test_behaviour_weight_hand_worked_and_truncated():
  # Proximal vs behaviour: weights e^{0.5}=1.65, e^{-1}=0.37, e^{2}=7.4
  # truncated at 2; the ratio (current vs proximal) is 1 everywhere.
  old = np.array([[0.5, -1.0, 2.0]], np.float32)
  behaviour = np.zeros((1, 3), np.float32)
  adv = np.array([[1.0, -1.0, 1.0]], np.float32)
  mask = np.ones((1, 3), bool)
  loss, diag = losses.ppo_policy_loss(
    old,
    old,
    adv,
    mask,
    eps_low=0.2,
    eps_high=0.2,
    behaviour_logp=behaviour,
    behaviour_cap=2.0,
  )
  w = [np.exp(0.5), np.exp(-1.0), 2.0]
  np.testing.assert_allclose(loss, (-w[0] + w[1] - w[2]) / 3, rtol=1e-6)
  np.testing.assert_allclose(diag["behaviour_weight_mean"], np.mean(w))
  np.testing.assert_allclose(diag["behaviour_cap_frac"], 1 / 3)
  # The weight carries no gradient: d loss / d logp = -A * w * ratio.
  grad = jax.grad(
    lambda lp: losses.ppo_policy_loss(
      lp, old, adv, mask, eps_low=0.2, eps_high=0.2, behaviour_logp=behaviour
    )[0]
  )(old)
  np.testing.assert_allclose(grad, -adv * np.array([w]) / 3, rtol=1e-6)
  with pytest.raises(ValueError, match="behaviour_cap must be > 0"):
    losses.ppo_policy_loss(
      old, old, adv, mask, eps_low=0.2, eps_high=0.2, behaviour_cap=0.0
    )


def test_policy_gradient_is_zero_when_clipped():
  # A > 0 and ratio above 1 + eps: no gradient pushes further.
  old = np.zeros((1, 2), np.float32)
  adv = np.ones((1, 2), np.float32)
  mask = np.ones((1, 2), bool)
  grad = jax.grad(
    lambda lp: losses.ppo_policy_loss(
      lp, old, adv, mask, eps_low=0.2, eps_high=0.2
    )[0]
  )(jnp.array([[0.5, 0.0]]))
  np.testing.assert_allclose(grad, [[0.0, -0.5]], atol=1e-6)


def test_value_loss_hand_worked():
  values = np.array([[1.0, 0.0, 0.5]], np.float32)
  old = np.array([[0.0, 0.0, 0.0]], np.float32)
  returns = np.array([[2.0, 1.0, -1.0]], np.float32)
  mask = np.ones((1, 3), bool)
  loss, diag = losses.clipped_value_loss(
    values, old, returns, mask, clip_eps=0.2
  )
  # t0: v=1 -> clip 0.2; errs 1, 3.24 -> 0.5*3.24 = 1.62 (clipped larger)
  # t1: v=0 = old; errs 1, 1 -> 0.5
  # t2: v=.5 -> clip .2; errs 2.25, 1.44 -> 1.125
  np.testing.assert_allclose(loss, (1.62 + 0.5 + 1.125) / 3, rtol=1e-6)
  np.testing.assert_allclose(diag["value_clip_frac"], 1 / 3, rtol=1e-6)
  loss, _ = losses.clipped_value_loss(values, old, returns, mask, clip_eps=None)
  np.testing.assert_allclose(loss, (0.5 + 0.5 + 1.125) / 3, rtol=1e-6)


def test_value_clip_frac_counts_only_values_outside_the_range():
  # Values inside the range, where old + (v - old) differs from v in the
  # last bit for a fifth of the pairs: none of them is clipped, whichever
  # error the rounding makes larger.
  rng = np.random.default_rng(11)
  old = (0.1 * rng.standard_normal((8, 64))).astype(np.float32)
  values = (old + rng.uniform(-0.19, 0.19, old.shape)).astype(np.float32)
  returns = rng.standard_normal(old.shape).astype(np.float32)
  mask = np.ones(old.shape, bool)
  assert np.mean(old + (values - old) != values) > 0.1  # the premise
  _, diag = losses.clipped_value_loss(values, old, returns, mask, clip_eps=0.2)
  assert float(diag["value_clip_frac"]) == 0.0
  # Past the range towards the return on even columns (the clipped error
  # is the larger there), away from it on odd ones (the unclipped is).
  even = np.arange(64) % 2 == 0
  far = np.where(even, old + 0.5, old - 0.5)
  far_returns = old + 1.0
  _, diag = losses.clipped_value_loss(far, old, far_returns, mask, clip_eps=0.2)
  np.testing.assert_allclose(diag["value_clip_frac"], 0.5, rtol=1e-6)


def test_value_loss_matches_numpy():
  rng = np.random.default_rng(5)
  d = random_batch(rng)
  loss, _ = losses.clipped_value_loss(
    d["values"],
    d["old_values"],
    d["returns"],
    d["mask"],
    clip_eps=0.3,
    agg_mode="seq_mean_token_mean",
  )
  v, o, r = d["values"], d["old_values"], d["returns"]
  vc = o + np.clip(v - o, -0.3, 0.3)
  per = 0.5 * np.maximum((v - r) ** 2, (vc - r) ** 2)
  want = numpy_aggregate(per, d["mask"], "seq_mean_token_mean")
  np.testing.assert_allclose(loss, want, rtol=1e-5)


def test_entropy_and_log_probs_match_numpy():
  rng = np.random.default_rng(6)
  d = random_batch(rng, v=11)
  logits = d["logits"]
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  stats = token_stats.stats_from_logits(logits, d["tokens"], extra=("entropy",))
  np.testing.assert_allclose(
    stats["entropy"], -(p * np.log(p)).sum(-1), rtol=1e-5
  )
  want = np.log(np.take_along_axis(p, d["tokens"][..., None], -1)[..., 0])
  np.testing.assert_allclose(stats["logp"], want, rtol=1e-5, atol=1e-6)


def test_explained_variance():
  mask = np.array([[1, 1, 1, 0]], bool)
  returns = np.array([[1.0, 2.0, 3.0, 99.0]], np.float32)
  np.testing.assert_allclose(
    losses.explained_variance(returns, returns, mask), 1.0
  )
  np.testing.assert_allclose(
    losses.explained_variance(np.full((1, 4), 2.0), returns, mask),
    0.0,
    atol=1e-6,
  )
  assert float(losses.explained_variance(returns, np.ones((1, 4)), mask)) == 0


def _total_loss(params, batch, mode, norm):
  """Policy + value + entropy loss of a tiny linear 'model' over logits."""
  logits = jnp.einsum("btd,dv->btv", batch["features"], params["w"])
  stats = token_stats.stats_from_logits(
    logits, batch["tokens"], extra=("entropy",)
  )
  logp = stats["logp"]
  values = batch["features"][..., 0] * params["v"]
  kwargs = dict(agg_mode=mode, norm=norm, norm_length=13.0)
  pl, pdiag = losses.ppo_policy_loss(
    logp,
    batch["old_logp"],
    batch["advantages"],
    batch["mask"],
    eps_low=0.2,
    eps_high=0.28,
    dual_clip=3.0,
    **kwargs,
  )
  vl, _ = losses.clipped_value_loss(
    values,
    batch["old_values"],
    batch["returns"],
    batch["mask"],
    clip_eps=0.2,
    **kwargs,
  )
  ent = losses.aggregate(
    stats["entropy"],
    batch["mask"],
    mode,
    norm=norm,
    norm_length=13.0,
  )
  return pl + 0.5 * vl - 0.01 * ent, pdiag["clip_frac"]


@pytest.mark.parametrize("mode", losses.AGG_MODES)
def test_gradient_accumulation_is_exact(mode):
  rng = np.random.default_rng(8)
  b, t, d, v = 8, 10, 4, 7
  d_ = random_batch(rng, b, t)
  d_["mask"][3] = False  # an empty row inside a micro-batch
  batch = dict(
    features=rng.normal(size=(b, t, d)).astype(np.float32),
    tokens=rng.integers(0, v, size=(b, t)),
    old_logp=d_["old_logp"] - 1.0,
    advantages=d_["advantages"],
    old_values=d_["old_values"],
    returns=d_["returns"],
    mask=d_["mask"],
  )
  params = dict(
    w=jnp.asarray(rng.normal(size=(d, v)), jnp.float32),
    v=jnp.asarray(0.3, jnp.float32),
  )
  grad_fn = jax.jit(
    jax.value_and_grad(_total_loss, has_aux=True), static_argnums=2
  )
  full_norm = losses.normalizer_for(batch["mask"])
  (full_loss, full_clip), full_grad = grad_fn(params, batch, mode, full_norm)

  acc_loss, acc_clip = 0.0, 0.0
  acc_grad = jax.tree.map(jnp.zeros_like, params)
  for micro in range(4):  # 4 micro-batches of 2 rows
    rows = slice(2 * micro, 2 * micro + 2)
    mb = jax.tree.map(lambda x, rows=rows: x[rows], batch)
    (loss, clip), grad = grad_fn(params, mb, mode, full_norm)
    acc_loss += loss
    acc_clip += clip
    acc_grad = jax.tree.map(jnp.add, acc_grad, grad)

  np.testing.assert_allclose(acc_loss, full_loss, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(acc_clip, full_clip, rtol=1e-5, atol=1e-6)
  chex.assert_trees_all_close(acc_grad, full_grad, rtol=1e-5, atol=1e-6)

  # Normalising each micro-batch by itself would not be exact (sanity check
  # that this test can fail).
  own = sum(
    grad_fn(
      params,
      jax.tree.map(lambda x, i=i: x[2 * i : 2 * i + 2], batch),
      mode,
      losses.normalizer_for(batch["mask"][2 * i : 2 * i + 2]),
    )[0][0]
    for i in range(4)
  )
  assert abs(float(own) - float(full_loss)) > 1e-3


def test_jitted_losses_trace_once():
  chex.clear_trace_counter()

  @jax.jit
  @chex.assert_max_traces(n=1)
  def step(d):
    policy, _ = losses.ppo_policy_loss(
      d["logp"],
      d["old_logp"],
      d["advantages"],
      d["mask"],
      eps_low=0.2,
      eps_high=0.2,
      dual_clip=3.0,
    )
    value, _ = losses.clipped_value_loss(
      d["values"], d["old_values"], d["returns"], d["mask"], clip_eps=0.2
    )
    return policy + value

  rng = np.random.default_rng(9)
  for _ in range(3):
    step(random_batch(rng))
