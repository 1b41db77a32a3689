"""Loads Hugging Face Llama / Qwen2 checkpoints into `transformer` parameters.

A checkpoint directory holds `config.json` and the weights, either in one
`model.safetensors` or in shards listed by `model.safetensors.index.json`.
Tensors are read one at a time (safetensors memory-maps the files), turned
into our layout on the host, cast to `param_dtype` and placed straight into
their target sharding with `jax.make_array_from_callback`, so each device
receives only its own slice and the whole model never sits on one device.

Names and layouts, with L = model.layers.{i} and B = trunk/layers_{i} (torch
`Linear` weights are [out, in]):

  model.embed_tokens.weight [V, D]        trunk/embed/embedding [V, D]
  L.self_attn.q_proj.weight [N*H, D]      B/attn/q_proj/kernel [D, N, H]
  L.self_attn.q_proj.bias [N*H]           B/attn/q_proj/bias [N, H]
  L.self_attn.{k,v}_proj: as q_proj with K heads
  L.self_attn.o_proj.weight [D, N*H]      B/attn/o_proj/kernel [N, H, D]
  L.mlp.{gate,up}_proj.weight [F, D]      B/mlp/{gate,up}_proj/kernel [D, F]
  L.mlp.down_proj.weight [D, F]           B/mlp/down_proj/kernel [F, D]
  L.input_layernorm.weight [D]            B/attn_norm/scale [D]
  L.post_attention_layernorm.weight [D]   B/mlp_norm/scale [D]
  model.norm.weight [D]                   trunk/final_norm/scale [D]
  lm_head.weight [V, D] (untied only)     lm_head/kernel [D, V]

`transformers` stores q and k for the same half-split ("rotate_half") rotary
layout that `layers.apply_rope` uses, so no permutation is needed. Meta's
original (interleaved) Llama checkpoints are not this format.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
import contextlib
import dataclasses
import functools
import json
import pathlib
from typing import Any

import jax
import numpy as np

from codeagent_rl.models import transformer

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")
CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Derived buffers that old `transformers` releases saved with the weights;
# they are recomputed from rope_theta, so they are skipped, not errors.
_DERIVED_SUFFIXES = (".rotary_emb.inv_freq",)
_LM_HEAD = "lm_head.weight"
_EMBED = "model.embed_tokens.weight"
# Architecture fields of TransformerConfig that a checkpoint determines.
_ARCH_FIELDS = (
  "vocab_size",
  "num_layers",
  "embed_dim",
  "num_heads",
  "num_kv_heads",
  "head_dim",
  "mlp_dim",
  "rope_theta",
  "rms_eps",
  "qkv_bias",
  "tie_embeddings",
)
_MAX_LISTED = 8


def _safetensors() -> Any:
  """Imports `safetensors`, saying how to install it if missing."""
  try:
    import safetensors
  except ImportError as e:
    raise ImportError(
      "Reading Hugging Face weights needs the `safetensors` package;"
      " install the extra: pip install -e '.[hf]'."
    ) from e
  return safetensors


def read_hf_config(ckpt_dir: str | pathlib.Path) -> dict[str, Any]:
  """The parsed `config.json` of a checkpoint directory."""
  path = pathlib.Path(ckpt_dir) / CONFIG_FILE
  if not path.is_file():
    raise FileNotFoundError(
      f"{path}: no {CONFIG_FILE}; expected a Hugging Face checkpoint"
      " directory (as written by save_pretrained)."
    )
  with path.open() as f:
    return json.load(f)


def _unsupported(field: str, value: Any, why: str) -> ValueError:
  return ValueError(
    f"config.json: {field}={value!r}: {why}, which"
    " codeagent_rl.models.transformer does not implement."
  )


def _rope_theta(hf_config: Mapping[str, Any]) -> float:
  """rope_theta from a v4 (`rope_theta`, `rope_scaling`) or v5 config."""
  scaling = hf_config.get("rope_scaling")
  if scaling is not None:
    raise _unsupported("rope_scaling", scaling, "rotary scaling")
  params = hf_config.get("rope_parameters")
  if params is None:
    return float(hf_config.get("rope_theta", 10000.0))
  if not isinstance(params, Mapping) or "rope_type" not in params:
    raise _unsupported(
      "rope_parameters", params, "per-layer-type rotary parameters"
    )
  if params["rope_type"] != "default":
    raise _unsupported("rope_parameters", params, "rotary scaling")
  if params.get("partial_rotary_factor", 1.0) != 1.0:
    raise _unsupported("rope_parameters", params, "partial rotary embedding")
  return float(params.get("rope_theta", hf_config.get("rope_theta", 10000.0)))


def _sliding_window_in_use(hf_config: Mapping[str, Any]) -> bool:
  layer_types = hf_config.get("layer_types")
  if layer_types is not None:
    return any(t != "full_attention" for t in layer_types)
  # transformers' Qwen2: layers at index >= max_window_layers slide when
  # use_sliding_window is set.
  return bool(
    hf_config.get("use_sliding_window")
    and hf_config.get("sliding_window") is not None
    and hf_config.get("max_window_layers", 0) < hf_config["num_hidden_layers"]
  )


def config_from_hf(
  hf_config: Mapping[str, Any],
  *,
  dtype: str,
  param_dtype: str,
  remat: str,
  logits_chunk: int = 0,
  attention: str = "plain",
  attention_chunk: int = 512,
) -> transformer.TransformerConfig:
  """Our model config for a Llama or Qwen2 `config.json`.

  Args:
    hf_config: the parsed `config.json`.
    dtype: activation dtype name ("float32", "bfloat16").
    param_dtype: parameter dtype name.
    remat: rematerialisation policy, a key of `transformer.REMAT_POLICIES`.
    logits_chunk: positions per log-prob chunk (`TransformerConfig`).
    attention: attention implementation of whole-row passes
      (`TransformerConfig`).
    attention_chunk: positions per chunk of chunked attention.

  Returns:
    The validated `TransformerConfig`; init_std is the checkpoint's
    initializer_range (used only by parameters that are not imported).

  Raises:
    ValueError: for another model_type or a feature our model lacks (rotary
      scaling, a sliding window in use, MLP bias, Llama's attention_bias,
      an activation other than silu), naming the field.
  """
  model_type = hf_config.get("model_type")
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise ValueError(
      f"config.json: model_type={model_type!r} is not supported; expected"
      f" one of {SUPPORTED_MODEL_TYPES}."
    )
  missing = [
    k
    for k in (
      "vocab_size",
      "hidden_size",
      "num_hidden_layers",
      "num_attention_heads",
      "intermediate_size",
    )
    if hf_config.get(k) is None
  ]
  if missing:
    raise ValueError(f"config.json: missing fields {missing}.")
  act = hf_config.get("hidden_act", "silu")
  if act != "silu":
    raise _unsupported("hidden_act", act, "an activation other than silu")
  if hf_config.get("mlp_bias", False):
    raise _unsupported("mlp_bias", True, "biases in the MLP")
  if model_type == "llama" and hf_config.get("attention_bias", False):
    # Llama's flag also adds a bias to o_proj; our o_proj has none.
    raise _unsupported("attention_bias", True, "a bias on o_proj")
  if _sliding_window_in_use(hf_config):
    raise _unsupported(
      "use_sliding_window",
      hf_config.get("use_sliding_window"),
      "sliding-window attention",
    )
  hidden = hf_config["hidden_size"]
  heads = hf_config["num_attention_heads"]
  head_dim = hf_config.get("head_dim")
  if head_dim is None:
    if hidden % heads:
      raise ValueError(
        f"config.json: hidden_size={hidden} is not a multiple of"
        f" num_attention_heads={heads} and head_dim is not given."
      )
    head_dim = hidden // heads
  return transformer.TransformerConfig(
    vocab_size=hf_config["vocab_size"],
    num_layers=hf_config["num_hidden_layers"],
    embed_dim=hidden,
    num_heads=heads,
    num_kv_heads=hf_config.get("num_key_value_heads") or heads,
    head_dim=head_dim,
    mlp_dim=hf_config["intermediate_size"],
    rope_theta=_rope_theta(hf_config),
    rms_eps=float(hf_config.get("rms_norm_eps", 1e-6)),
    # Qwen2 always has q/k/v biases; Llama's attention_bias is rejected above.
    qkv_bias=model_type == "qwen2",
    # Both transformers classes default to untied.
    tie_embeddings=bool(hf_config.get("tie_word_embeddings", False)),
    dtype=dtype,
    param_dtype=param_dtype,
    remat=remat,
    init_std=float(hf_config.get("initializer_range", 0.02)),
    logits_chunk=logits_chunk,
    attention=attention,
    attention_chunk=attention_chunk,
  )


def _check_config_matches(
  config: transformer.TransformerConfig, hf_config: Mapping[str, Any]
) -> None:
  expected = config_from_hf(
    hf_config,
    dtype=config.dtype,
    param_dtype=config.param_dtype,
    remat=config.remat,
  )
  diffs = [
    f"model.{name}={getattr(config, name)!r} but the checkpoint has"
    f" {getattr(expected, name)!r}"
    for name in _ARCH_FIELDS
    if getattr(config, name) != getattr(expected, name)
  ]
  if diffs:
    raise ValueError(
      "The model config does not match the checkpoint's config.json: "
      + "; ".join(diffs)
      + "."
    )


# Layout conversions, torch layout -> ours (see the module docstring).
def _identity(w: np.ndarray) -> np.ndarray:
  return w


def _transpose(w: np.ndarray) -> np.ndarray:
  return w.T


def _split_out_heads(w: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
  return w.T.reshape(w.shape[1], heads, head_dim)  # [N*H, D] -> [D, N, H]


def _split_bias_heads(b: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
  return b.reshape(heads, head_dim)  # [N*H] -> [N, H]


def _split_in_heads(w: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
  return w.T.reshape(heads, head_dim, w.shape[0])  # [D, N*H] -> [N, H, D]


@dataclasses.dataclass(frozen=True)
class _Tensor:
  """One checkpoint tensor and where it goes."""

  hf_name: str
  hf_shape: tuple[int, ...]
  path: tuple[str, ...]  # inside the `params` collection
  to_ours: Callable[[np.ndarray], np.ndarray]


def _plan(
  config: transformer.TransformerConfig, lm_head: bool
) -> list[_Tensor]:
  """The checkpoint tensors our model needs, layer by layer."""
  d, f, v = config.embed_dim, config.mlp_dim, config.vocab_size
  hd = config.head_dim
  plan = [_Tensor(_EMBED, (v, d), ("trunk", "embed", "embedding"), _identity)]
  for i in range(config.num_layers):
    hf, ours = f"model.layers.{i}.", ("trunk", f"layers_{i}")
    for proj, heads in (
      ("q_proj", config.num_heads),
      ("k_proj", config.num_kv_heads),
      ("v_proj", config.num_kv_heads),
    ):
      split = functools.partial(_split_out_heads, heads=heads, head_dim=hd)
      plan.append(
        _Tensor(
          f"{hf}self_attn.{proj}.weight",
          (heads * hd, d),
          (*ours, "attn", proj, "kernel"),
          split,
        )
      )
      if config.qkv_bias:
        split = functools.partial(_split_bias_heads, heads=heads, head_dim=hd)
        plan.append(
          _Tensor(
            f"{hf}self_attn.{proj}.bias",
            (heads * hd,),
            (*ours, "attn", proj, "bias"),
            split,
          )
        )
    split = functools.partial(
      _split_in_heads, heads=config.num_heads, head_dim=hd
    )
    plan += [
      _Tensor(
        f"{hf}self_attn.o_proj.weight",
        (d, config.num_heads * hd),
        (*ours, "attn", "o_proj", "kernel"),
        split,
      ),
      _Tensor(
        f"{hf}mlp.gate_proj.weight",
        (f, d),
        (*ours, "mlp", "gate_proj", "kernel"),
        _transpose,
      ),
      _Tensor(
        f"{hf}mlp.up_proj.weight",
        (f, d),
        (*ours, "mlp", "up_proj", "kernel"),
        _transpose,
      ),
      _Tensor(
        f"{hf}mlp.down_proj.weight",
        (d, f),
        (*ours, "mlp", "down_proj", "kernel"),
        _transpose,
      ),
      _Tensor(
        f"{hf}input_layernorm.weight",
        (d,),
        (*ours, "attn_norm", "scale"),
        _identity,
      ),
      _Tensor(
        f"{hf}post_attention_layernorm.weight",
        (d,),
        (*ours, "mlp_norm", "scale"),
        _identity,
      ),
    ]
  plan.append(
    _Tensor(
      "model.norm.weight", (d,), ("trunk", "final_norm", "scale"), _identity
    )
  )
  if lm_head:
    plan.append(_Tensor(_LM_HEAD, (v, d), ("lm_head", "kernel"), _transpose))
  return plan


class _Checkpoint(contextlib.ExitStack):
  """Names, shapes and tensors of a safetensors checkpoint, read lazily."""

  def __init__(self, ckpt_dir: str | pathlib.Path):
    super().__init__()
    self.directory = pathlib.Path(ckpt_dir)
    self._handles: dict[pathlib.Path, Any] = {}
    single, index = self.directory / SINGLE_FILE, self.directory / INDEX_FILE
    if single.is_file():
      self.files = {name: single for name in self._open(single).keys()}
    elif index.is_file():
      with index.open() as f:
        weight_map = json.load(f).get("weight_map")
      if not isinstance(weight_map, dict):
        raise ValueError(f"{index}: no 'weight_map' object.")
      self.files = {k: self.directory / v for k, v in weight_map.items()}
      for path in sorted(set(self.files.values())):
        if not path.is_file():
          raise FileNotFoundError(
            f"{index} lists {path.name}, which is absent."
          )
    else:
      raise FileNotFoundError(
        f"{self.directory}: neither {SINGLE_FILE} nor {INDEX_FILE}; only"
        " safetensors checkpoints are supported (convert .bin files first)."
      )

  def _open(self, path: pathlib.Path):
    if path not in self._handles:
      self._handles[path] = self.enter_context(
        _safetensors().safe_open(str(path), framework="numpy")
      )
    return self._handles[path]

  def _handle(self, name: str):
    handle = self._open(self.files[name])
    if name not in handle.keys():
      raise ValueError(
        f"{self.directory / INDEX_FILE} maps {name} to {self.files[name].name},"
        " which does not hold it."
      )
    return handle

  def shape(self, name: str) -> tuple[int, ...]:
    """Shape from the file header; reads no tensor data."""
    return tuple(self._handle(name).get_slice(name).get_shape())

  def read(self, name: str) -> np.ndarray:
    """The tensor as a host array (bfloat16 as ml_dtypes.bfloat16)."""
    return self._handle(name).get_tensor(name)


def _listing(names: list[str]) -> str:
  shown = ", ".join(names[:_MAX_LISTED])
  more = len(names) - _MAX_LISTED
  return shown + (f" (and {more} more)" if more > 0 else "")


def _check_tensors(
  ckpt: _Checkpoint, plan: list[_Tensor], tolerated: set[str]
) -> None:
  """Raises unless the checkpoint holds exactly the planned tensors.

  Names in `tolerated` and derived buffers may also be present.
  """
  planned = {t.hf_name for t in plan}
  missing = [t.hf_name for t in plan if t.hf_name not in ckpt.files]
  shapes = [
    f"{t.hf_name} is {list(ckpt.shape(t.hf_name))}, expected {list(t.hf_shape)}"
    for t in plan
    if t.hf_name in ckpt.files and ckpt.shape(t.hf_name) != t.hf_shape
  ]
  unused = sorted(
    n
    for n in ckpt.files
    if n not in planned
    and n not in tolerated
    and not n.endswith(_DERIVED_SUFFIXES)
  )
  problems = []
  if missing:
    problems.append(f"missing tensors: {_listing(missing)}")
  if shapes:
    problems.append(f"wrong shapes: {_listing(shapes)}")
  if unused:
    problems.append(f"tensors the model has no place for: {_listing(unused)}")
  if problems:
    raise ValueError(
      f"Checkpoint {ckpt.directory} does not fit the model config: "
      + "; ".join(problems)
      + "."
    )


def _path_str(path: tuple[Any, ...]) -> str:
  return "/".join(str(getattr(k, "key", k)) for k in path)


def _sharding_table(shardings: Any, paths: list[tuple[str, ...]]) -> dict:
  """Maps each params path to its sharding; the tree must match exactly."""
  leaves = jax.tree_util.tree_flatten_with_path(shardings)[0]
  table = {
    tuple(str(getattr(k, "key", k)) for k in path): s for path, s in leaves
  }
  want = set(paths)
  missing = sorted(_path_str(p) for p in want - set(table))
  extra = sorted(_path_str(p) for p in set(table) - want)
  if missing or extra:
    raise ValueError(
      "shardings must have one leaf per parameter: missing"
      f" [{_listing(missing)}], unexpected [{_listing(extra)}]."
    )
  for path, sharding in table.items():
    if not isinstance(sharding, jax.sharding.Sharding):
      raise ValueError(
        f"shardings at {_path_str(path)} is {sharding!r}, not a"
        " jax.sharding.Sharding."
      )
  return table


def _place(host: np.ndarray, sharding, path: tuple[str, ...]) -> jax.Array:
  """Puts one host array on devices; each device gets only its slice.

  Each slice goes by `device_put` (an explicit transfer, as the main job's
  transfer guard requires; `make_array_from_callback` counts as implicit).
  """
  if sharding is None:
    return jax.device_put(host)
  try:
    pieces = [
      jax.device_put(host[index], device)
      for device, index in sharding.addressable_devices_indices_map(
        host.shape
      ).items()
    ]
    return jax.make_array_from_single_device_arrays(
      host.shape, sharding, pieces
    )
  except ValueError as e:
    raise ValueError(
      f"Cannot place {_path_str(path)} of shape {host.shape} with"
      f" {sharding}: {e}"
    ) from e


def _set(tree: dict, path: tuple[str, ...], value: Any) -> None:
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def _load(
  ckpt_dir: str | pathlib.Path,
  config: transformer.TransformerConfig,
  shardings: Any,
  *,
  lm_head: bool,
  tolerated: set[str],
  extra: dict[tuple[str, ...], np.ndarray],
) -> dict[str, Any]:
  """Shared body of `load_params` and `critic_from_hf`."""
  _check_config_matches(config, read_hf_config(ckpt_dir))
  plan = _plan(config, lm_head=lm_head)
  paths = [("params", *t.path) for t in plan] + [("params", *p) for p in extra]
  table = None if shardings is None else _sharding_table(shardings, paths)
  dtype = np.dtype(config.jnp_param_dtype)
  variables: dict[str, Any] = {}
  with _Checkpoint(ckpt_dir) as ckpt:
    _check_tensors(ckpt, plan, tolerated)
    for t in plan:
      host = np.ascontiguousarray(t.to_ours(ckpt.read(t.hf_name)), dtype=dtype)
      path = ("params", *t.path)
      sharding = None if table is None else table[path]
      _set(variables, path, _place(host, sharding, path))
      del host  # one tensor on the host at a time
    if config.tie_embeddings and _LM_HEAD in ckpt.files:
      _check_tied_head(ckpt, config)
  for sub, value in extra.items():
    path = ("params", *sub)
    sharding = None if table is None else table[path]
    _set(variables, path, _place(value.astype(dtype), sharding, path))
  return variables


def _check_tied_head(ckpt: _Checkpoint, config) -> None:
  """A tied model may still store lm_head; it must equal the embedding."""
  shape = (config.vocab_size, config.embed_dim)
  if ckpt.shape(_LM_HEAD) != shape or not np.array_equal(
    ckpt.read(_LM_HEAD), ckpt.read(_EMBED)
  ):
    raise ValueError(
      f"Checkpoint {ckpt.directory}: tie_word_embeddings is set but {_LM_HEAD}"
      f" differs from {_EMBED}; the model cannot represent both."
    )


def load_params(
  ckpt_dir: str | pathlib.Path,
  config: transformer.TransformerConfig,
  shardings: Any = None,
) -> dict[str, Any]:
  """Actor variables from a Hugging Face Llama / Qwen2 checkpoint.

  Args:
    ckpt_dir: directory with config.json and safetensors weights.
    config: our model config; its architecture fields must equal
      `config_from_hf(config.json)` (dtype, remat and init_std are free).
    shardings: None (every tensor on the default device) or a pytree like
      the result, `{"params": {...}}`, of `jax.sharding.Sharding` leaves, e.g.
      `nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh,
      rules)` of the actor's `jax.eval_shape`d variables.

  Returns:
    `{"params": ...}` for `transformer.Actor(config).apply`, plain arrays of
    `config.param_dtype` in our layout, each in its sharding.

  Raises:
    ValueError: the config differs from config.json, a tensor is missing,
      has the wrong shape or has no place in the model, or shardings does
      not match the parameters; the message names them.
    FileNotFoundError: the directory lacks config.json or the weights.
  """
  tolerated = {_LM_HEAD} if config.tie_embeddings else set()
  return _load(
    ckpt_dir,
    config,
    shardings,
    lm_head=not config.tie_embeddings,
    tolerated=tolerated,
    extra={},
  )


def critic_from_hf(
  ckpt_dir: str | pathlib.Path,
  config: transformer.TransformerConfig,
  shardings: Any = None,
) -> dict[str, Any]:
  """Critic variables: the checkpoint's trunk and a zero value head.

  The checkpoint's lm_head (if any) is not used. The value head is zero, as
  `transformer.Critic` initialises it, so the first values are all 0.

  Args:
    ckpt_dir: as `load_params`.
    config: as `load_params`.
    shardings: None or a pytree like the result (with `value_head`).

  Returns:
    `{"params": {"trunk": ..., "value_head": ...}}` for
    `transformer.Critic(config).apply`.
  """
  d = config.embed_dim
  return _load(
    ckpt_dir,
    config,
    shardings,
    lm_head=False,
    tolerated={_LM_HEAD},
    extra={
      ("value_head", "kernel"): np.zeros((d, 1), np.float32),
    },
  )
