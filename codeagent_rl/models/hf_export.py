"""Saves `transformer` actor parameters as a Hugging Face Llama / Qwen2 model.

The inverse of `hf_import`: the same tensor names and torch layouts (the
table in `hf_import`'s docstring), so `hf_import.load_params` of an export
gives back the exported parameters exactly, and
`transformers.AutoModelForCausalLM.from_pretrained` loads it.

A checkpoint directory gets `config.json` (`hf_config_from`) and one
`model.safetensors`. The file is streamed: its header is computed from the
shapes, then each tensor is fetched from its devices (`jax.device_get`),
turned into the torch layout and written, so the host holds one tensor (and
its converted copy) at a time. `lm_head.weight` is written only for untied
embeddings; `transformers` ties a tied model's head to the embedding on load.

Llama's `attention_bias` also biases o_proj, which our model lacks, and Qwen2
always has q/k/v biases: a model with `qkv_bias` exports as "qwen2" only,
one without as "llama" only.
"""

from __future__ import annotations

from collections.abc import Mapping
import functools
import json
import os
import pathlib
import struct
from typing import Any

from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from codeagent_rl.models import hf_import
from codeagent_rl.models import transformer

# model_type -> the `architectures` entry `transformers` loads it with.
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
# Dtypes a checkpoint can be saved in -> safetensors' name of each.
_SAFETENSORS_DTYPES = {"float32": "F32", "bfloat16": "BF16"}
# safetensors: an 8-byte little-endian header length, the JSON header padded
# with spaces to a multiple of 8, then the tensors' bytes back to back.
_HEADER_ALIGN = 8


def _check_model_type(
  config: transformer.TransformerConfig, model_type: str
) -> None:
  if model_type not in ARCHITECTURES:
    raise ValueError(
      f"model_type={model_type!r} is not supported; expected one of"
      f" {sorted(ARCHITECTURES)}."
    )
  if config.qkv_bias and model_type == "llama":
    raise ValueError(
      "model.qkv_bias=True cannot be exported as model_type 'llama': Llama's"
      " attention_bias also adds a bias to o_proj; export it as 'qwen2'"
      " (q/k/v biases only)."
    )
  if not config.qkv_bias and model_type == "qwen2":
    raise ValueError(
      "model.qkv_bias=False cannot be exported as model_type 'qwen2', which"
      " always has q/k/v biases; export it as 'llama'."
    )


def hf_config_from(
  config: transformer.TransformerConfig,
  model_type: str,
  base: Mapping[str, Any] | None = None,
  *,
  dtype: str = "float32",
) -> dict[str, Any]:
  """The `config.json` of a Hugging Face checkpoint of this model.

  Args:
    config: our model config.
    model_type: "llama" or "qwen2".
    base: the `config.json` of the checkpoint the model was imported from,
      or None. Its fields are kept (token ids, max_position_embeddings,
      ...) and only the architecture fields are overwritten.
    dtype: the dtype the weights are saved in ("float32", "bfloat16").

  Returns:
    The config dict; `hf_import.config_from_hf` of it gives `config`'s
    architecture back.

  Raises:
    ValueError: an unknown model_type or dtype, qkv_bias with "llama", no
      qkv_bias with "qwen2", a base of another model_type, or a base whose
      other fields describe a model ours is not (e.g. rotary scaling).
  """
  _check_model_type(config, model_type)
  if dtype not in _SAFETENSORS_DTYPES:
    raise ValueError(
      f"dtype={dtype!r}: expected one of {sorted(_SAFETENSORS_DTYPES)}."
    )
  out = dict(base) if base is not None else {}
  if out.get("model_type", model_type) != model_type:
    raise ValueError(
      f"base config.json has model_type={out['model_type']!r}; cannot export"
      f" as {model_type!r}."
    )
  out.update(
    architectures=[ARCHITECTURES[model_type]],
    model_type=model_type,
    vocab_size=config.vocab_size,
    hidden_size=config.embed_dim,
    num_hidden_layers=config.num_layers,
    num_attention_heads=config.num_heads,
    num_key_value_heads=config.num_kv_heads,
    head_dim=config.head_dim,
    intermediate_size=config.mlp_dim,
    hidden_act="silu",
    rms_norm_eps=config.rms_eps,
    tie_word_embeddings=config.tie_embeddings,
    # transformers >= 5 writes `dtype`, older releases `torch_dtype`.
    dtype=dtype,
    torch_dtype=dtype,
  )
  # transformers >= 5 reads rope_parameters, older releases rope_theta.
  out["rope_theta"] = config.rope_theta
  out["rope_parameters"] = {
    "rope_type": "default",
    "rope_theta": config.rope_theta,
  }
  if model_type == "llama":
    out.update(attention_bias=False, mlp_bias=False)
  else:
    out.setdefault("use_sliding_window", False)
  if base is None:
    out["initializer_range"] = config.init_std
  # What the checkpoint says must be the model: fields kept from the base
  # (rotary scaling, a sliding window, ...) could say otherwise.
  got = hf_import.config_from_hf(
    out,
    dtype=config.dtype,
    param_dtype=config.param_dtype,
    remat=config.remat,
  )
  diffs = [
    f"{name}: {getattr(got, name)!r}, not {getattr(config, name)!r}"
    for name in hf_import._ARCH_FIELDS
    if getattr(got, name) != getattr(config, name)
  ]
  if diffs:
    raise ValueError(
      "The exported config.json would describe another model ("
      + "; ".join(diffs)
      + "); check the base config.json's fields."
    )
  return out


# Our layout -> torch layout, by the `hf_import` conversion it inverts.
def _from_transposed(w: np.ndarray, hf_shape: tuple[int, ...]) -> np.ndarray:
  # [D, F] -> [F, D]; [D, N, H] -> [N*H, D]; [N, H, D] -> [D, N*H].
  return w.reshape(hf_shape[::-1]).T


def _from_reshaped(w: np.ndarray, hf_shape: tuple[int, ...]) -> np.ndarray:
  return w.reshape(hf_shape)  # [N, H] -> [N*H]; [D] -> [D]; [V, D] as is


_INVERSES = {
  hf_import._identity: _from_reshaped,
  hf_import._transpose: _from_transposed,
  hf_import._split_out_heads: _from_transposed,
  hf_import._split_in_heads: _from_transposed,
  hf_import._split_bias_heads: _from_reshaped,
}


def _to_torch(t: hf_import._Tensor, ours: np.ndarray) -> np.ndarray:
  fn = t.to_ours
  if isinstance(fn, functools.partial):
    fn = fn.func
  return _INVERSES[fn](ours, t.hf_shape)


def _model_shapes(config: transformer.TransformerConfig) -> dict[tuple, tuple]:
  """Path -> shape of every parameter of `transformer.Actor(config)`."""
  abstract = jax.eval_shape(
    transformer.Actor(config).init,
    jax.random.key(0),
    jnp.zeros((1, 1), jnp.int32),
    jnp.zeros((1, 1), jnp.int32),
    jnp.ones((1, 1), bool),
  )
  return _by_path(nn.unbox(abstract)["params"], lambda x: tuple(x.shape))


def _by_path(tree: Any, fn) -> dict[tuple[str, ...], Any]:
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {
    tuple(str(getattr(k, "key", k)) for k in path): fn(leaf)
    for path, leaf in leaves
  }


def _path_str(path: tuple[str, ...]) -> str:
  return "/".join(path)


def _leaves(
  params: Any, config: transformer.TransformerConfig
) -> dict[tuple[str, ...], Any]:
  """Path -> leaf of `params`; raises unless they are the model's params."""
  if not isinstance(params, Mapping) or set(params) != {"params"}:
    raise ValueError(
      "params must be the actor's variables, {'params': {...}}, as"
      " hf_import.load_params returns them."
    )
  table = _by_path(params["params"], lambda x: x)
  want = _model_shapes(config)
  missing = sorted(_path_str(p) for p in set(want) - set(table))
  extra = sorted(_path_str(p) for p in set(table) - set(want))
  shapes = sorted(
    f"{_path_str(p)} is {list(table[p].shape)}, expected {list(want[p])}"
    for p in set(want) & set(table)
    if tuple(table[p].shape) != want[p]
  )
  problems = [
    f"{what}: {hf_import._listing(names)}"
    for what, names in (
      ("missing", missing),
      ("not in the model", extra),
      ("wrong shapes", shapes),
    )
    if names
  ]
  if problems:
    raise ValueError(
      "params do not fit the model config: " + "; ".join(problems) + "."
    )
  return table


def save_params(
  params: Any,
  config: transformer.TransformerConfig,
  out_dir: str | os.PathLike[str],
  *,
  model_type: str,
  base_config: Mapping[str, Any] | None = None,
  dtype: str | None = "float32",
) -> None:
  """Writes `config.json` and `model.safetensors` into `out_dir`.

  Args:
    params: the actor's variables, `{"params": {...}}` as
      `hf_import.load_params` returns them (any sharding, any dtype).
    config: our model config of `params`.
    out_dir: the checkpoint directory (created if missing; files of the
      same names are replaced).
    model_type: "llama" or "qwen2" (see the module docstring).
    base_config: the imported checkpoint's `config.json`, or None (see
      `hf_config_from`).
    dtype: "float32", "bfloat16", or None for `config.param_dtype`.

  Raises:
    ValueError: the model cannot be this model_type (`hf_config_from`), or
      params do not hold exactly the model's parameters in our shapes.
  """
  dtype = config.param_dtype if dtype is None else dtype
  hf_config = hf_config_from(config, model_type, base_config, dtype=dtype)
  table = _leaves(params, config)
  plan = hf_import._plan(config, lm_head=not config.tie_embeddings)
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  np_dtype = np.dtype(transformer.DTYPES[dtype])
  header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
  offset = 0
  for t in plan:
    size = int(np.prod(t.hf_shape)) * np_dtype.itemsize
    header[t.hf_name] = {
      "dtype": _SAFETENSORS_DTYPES[dtype],
      "shape": list(t.hf_shape),
      "data_offsets": [offset, offset + size],
    }
    offset += size
  header_bytes = json.dumps(header, separators=(",", ":")).encode()
  header_bytes += b" " * (-len(header_bytes) % _HEADER_ALIGN)
  with (out / hf_import.SINGLE_FILE).open("wb") as f:
    f.write(struct.pack("<Q", len(header_bytes)))
    f.write(header_bytes)
    for t in plan:
      host = np.asarray(jax.device_get(table[t.path]))
      torch_layout = _to_torch(t, host.astype(np_dtype, copy=False))
      # Native byte order is little-endian on every platform jax runs on.
      f.write(np.ascontiguousarray(torch_layout).view(np.uint8).data)
      del host, torch_layout  # one tensor on the host at a time
  (out / hf_import.CONFIG_FILE).write_text(
    json.dumps(hf_config, indent=2, sort_keys=True) + "\n"
  )
