"""Per-token log-probs, entropies and argmaxes without [B, T, V] logits.

At Qwen2.5's 151,936-token vocabulary one 8k-token row of float32 logits
is ~5 GB, and the backward pass of a log-softmax keeps as much again. Here
the final hidden states [B, T, D] (small: D is ~900-3600) are cut into
chunks of `chunk` positions, and a `lax.scan` turns each chunk into its
logits [B, chunk, V], then into the per-token numbers the losses need, and
drops the logits. The scan body is rematerialised (`jax.checkpoint`): the
backward pass recomputes a chunk's logits from its hidden states instead of
keeping them, so the peak holds one chunk's logits, not T / chunk of them.
Inside a chunk everything is float32, as in the unchunked path, so values
and gradients agree with it to float32 rounding.

`chunk=0` computes every position at once (the same function of the
logits): small vocabularies, and the reference the chunked path is tested
against.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from codeagent_rl.models import sampler

# Stats a caller may ask for, besides the log-prob of the target.
EXTRA_STATS = ("entropy", "argmax_hit")


def stats_from_logits(
  logits: jax.Array,
  targets: jax.Array,
  *,
  temperature: float = 1.0,
  vocab_limit: int = 0,
  extra: tuple[str, ...] = (),
) -> dict[str, jax.Array]:
  """Per-position numbers of [..., V] logits that predict [...] targets.

  Args:
    logits: [..., V] logits (any float dtype; computed in float32).
    targets: [...] int ids the logits predict.
    temperature: the sampler's temperature (logits are divided by it).
    vocab_limit: ids at or above it are excluded (`sampler.limit_vocab`).
    extra: any of `EXTRA_STATS`.

  Returns:
    {"logp": [...] float32 log p(target)} plus, as asked, "entropy"
    (float32, of the tempered distribution) and "argmax_hit" (bool, the
    most likely id is the target; greedy accuracy, before temperature).
  """
  unknown = sorted(set(extra) - set(EXTRA_STATS))
  if unknown:
    raise ValueError(f"Unknown token stats {unknown}; expected {EXTRA_STATS}.")
  logits = sampler.limit_vocab(logits.astype(jnp.float32), vocab_limit)
  out = {}
  if "argmax_hit" in extra:
    out["argmax_hit"] = jnp.argmax(logits, axis=-1) == targets
  logp_all = jax.nn.log_softmax(logits / temperature, axis=-1)
  out["logp"] = jnp.take_along_axis(logp_all, targets[..., None], axis=-1)[
    ..., 0
  ]
  if "entropy" in extra:
    out["entropy"] = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
  return out


def token_stats(
  head: Callable[[jax.Array], jax.Array],
  hidden: jax.Array,
  targets: jax.Array,
  *,
  chunk: int,
  temperature: float = 1.0,
  vocab_limit: int = 0,
  extra: tuple[str, ...] = (),
) -> dict[str, jax.Array]:
  """`stats_from_logits(head(hidden), targets)`, `chunk` positions at a time.

  Args:
    head: hidden states [B, C, D] -> float logits [B, C, V] (e.g. the
      actor's output projection, `Actor.logits`, bound to its params).
    hidden: [B, T, D] final hidden states.
    targets: [B, T] int ids each position predicts.
    chunk: positions per chunk; 0 for all at once. T need not be a multiple
      (the last chunk is padded and its padding dropped).
    temperature: as `stats_from_logits`.
    vocab_limit: as `stats_from_logits`.
    extra: as `stats_from_logits`.

  Returns:
    The dict of `stats_from_logits`, each [B, T].
  """
  stats = lambda h, t: stats_from_logits(  # noqa: E731
    head(h),
    t,
    temperature=temperature,
    vocab_limit=vocab_limit,
    extra=extra,
  )
  b, t = targets.shape
  if not chunk or chunk >= t:
    return stats(hidden, targets)
  n = -(-t // chunk)
  pad = n * chunk - t
  if pad:
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
  # [B, n * C, ...] -> [n, B, C, ...]: the scan runs over the chunks.
  hs = hidden.reshape(b, n, chunk, hidden.shape[-1]).swapaxes(0, 1)
  ts = targets.reshape(b, n, chunk).swapaxes(0, 1)

  @jax.checkpoint
  def body(carry, xs):
    return carry, stats(*xs)

  _, out = jax.lax.scan(body, None, (hs, ts))
  return {
    k: v.swapaxes(0, 1).reshape(b, n * chunk)[:, :t] for k, v in out.items()
  }
