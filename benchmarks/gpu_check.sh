#!/usr/bin/env bash
# The checks that need a CUDA GPU: benchmarks/hf_ppo_bench.py at full depth
# (24 layers, bfloat16, one device) and the test files that touch the model,
# run on the GPU. Run from anywhere:
#
#   bash benchmarks/gpu_check.sh
#
# It writes benchmarks/results/hf_ppo_bench_gpu.json and exits non-zero if
# a part of the benchmark crashed or a test failed.
#
# Time: the set-up comes first and is not counted; the checks after it stop
# within GPU_CHECK_BUDGET_S (450 s by default): the benchmark gets
# BENCH_BUDGET_S (240 s; a part that does not fit becomes a "timeout" or
# "skipped" row of the JSON), the attention memory check
# ATTENTION_BUDGET_S (60 s), the tests what is left.
#
# The lent GPU machine reaches no package registry. It comes with Python
# 3.12 and JAX 0.11 with CUDA, flax, optax, orbax-checkpoint, chex, absl-py,
# transformers and torch, but not ml-collections or tensorboardX: those
# travel as pure-Python wheels in GPU_CHECK_WHEELS (default .whl/ in the
# repository; made on a machine with pip by
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl \
#     ml-collections==1.1.0 tensorboardX==2.6.5
# ) and are unpacked with --no-index into a scratch directory. The project
# itself is not installed: the repository root goes on PYTHONPATH, so the
# installed JAX is used even where it is newer than setup.py's range.
#
# Environment:
#   GPU_CHECK_INSTALL  auto (default): use what is installed plus the
#                      wheels; pip: pip install the project with jax[cuda]
#                      from the network (a machine that reaches PyPI).
#   GPU_CHECK_WHEELS   the folder of wheels for `auto` (default .whl).
#   JAX_CUDA_EXTRA     for `pip`: cuda12 or cuda13 (default: cuda13 when
#                      the driver supports CUDA 13, else cuda12).
#   PYTHON             the interpreter (default python3).
#   GPU_CHECK_BUDGET_S, BENCH_BUDGET_S, ATTENTION_BUDGET_S  seconds
#                      (integers; see Time above).
#   BENCH_ARGS         the benchmark's settings (default below).
#   GPU_CHECK_PLAN=1   print what would run (set-up, benchmark and test
#                      commands) and stop, without a GPU; the set-up's checks
#                      of this environment still run.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

plan="${GPU_CHECK_PLAN:-0}"
# Runs "$@", or in plan mode prints it.
step() {
  if [[ "${plan}" == 1 ]]; then
    printf 'gpu_check plan:'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}
for name in GPU_CHECK_BUDGET_S BENCH_BUDGET_S ATTENTION_BUDGET_S; do
  if [[ -n "${!name:-}" && ! "${!name}" =~ ^[0-9]+$ ]]; then
    echo "gpu_check: ${name}=${!name}: expected whole seconds." >&2
    exit 2
  fi
done
if [[ "${plan}" != 1 ]]; then
  nvidia-smi
fi

# --- Set-up -------------------------------------------------------------------

py="${PYTHON:-python3}"
sees_gpu() {
  "${py}" -c 'import jax, sys; sys.exit(jax.default_backend() != "gpu")' \
    2>/dev/null
}

install="${GPU_CHECK_INSTALL:-auto}"
if [[ "${install}" == "pip" ]]; then
  # "CUDA Version: 12.8" in nvidia-smi's header is the newest CUDA the
  # driver runs; CUDA 13 wheels need a driver that says 13 or more.
  driver_cuda="$( ( [[ "${plan}" == 1 ]] || nvidia-smi) | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -n 1)"
  extra="${JAX_CUDA_EXTRA:-$([[ "${driver_cuda:-0}" -ge 13 ]] && echo cuda13 || echo cuda12)}"
  echo "gpu_check: installing with jax[${extra}] (driver CUDA ${driver_cuda:-?})"
  start=${SECONDS}
  # The same jax range as setup.py, so the extra cannot pull another jax.
  step "${py}" -m pip install -e '.[test]' "jax[${extra}]>=0.10,<0.11"
  echo "gpu_check: install took $((SECONDS - start)) s"
elif [[ "${install}" == "auto" ]]; then
  wheels="${GPU_CHECK_WHEELS:-.whl}"
  site="$(mktemp -d /tmp/gpu_check_site.XXXXXX)"
  if compgen -G "${wheels}/*.whl" >/dev/null; then
    "${py}" -m pip install -q --no-index --no-deps --no-compile \
      --target "${site}" "${wheels}"/*.whl
  fi
  export PYTHONPATH="${PWD}:${site}${PYTHONPATH:+:${PYTHONPATH}}"
  missing="$("${py}" -c '
import importlib.util
need = ("ml_collections", "tensorboardX", "flax", "optax", "orbax.checkpoint",
        "chex", "absl", "transformers", "torch", "pytest", "xdist")
def found(name):
  # find_spec of a submodule raises when its parent package is missing.
  try:
    return importlib.util.find_spec(name) is not None
  except ModuleNotFoundError:
    return False
print(" ".join(m for m in need if not found(m)))')"
  if [[ -n "${missing}" ]]; then
    echo "gpu_check: missing modules: ${missing}; put their wheels in" \
      "${wheels}/ (see the top of this script)." >&2
    exit 1
  fi
else
  echo "gpu_check: GPU_CHECK_INSTALL=${install}: expected auto or pip." >&2
  exit 2
fi
"${py}" -c 'import jax, flax, optax; print("jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__, jax.devices())'
if [[ "${plan}" != 1 ]] && ! sees_gpu; then
  echo "gpu_check: JAX sees no GPU; stopping." >&2
  exit 1
fi

# --- Checks, within the budget ------------------------------------------------

budget="${GPU_CHECK_BUDGET_S:-450}"
bench_budget="${BENCH_BUDGET_S:-240}"
deadline=$((SECONDS + budget))
status=0

# JAX takes 75% of the GPU's memory at start by default; the benchmark's
# parts run each in its own process, so each may take more. Measured on
# one H200 (2026-12-04): at full depth the 8 x 2048 generation part took
# 95 s and the chunked learner part about 150 s, nearly all of it
# compilation (the train step alone 70.6 s), so two parts at a time
# (--jobs=2; the timings of parts that overlap are lower bounds) are what
# fit an 8-minute check; 64 x 8192 and the other variants are run by hand
# (BENCH_ARGS). Each part gets what is left of the benchmark's budget.
bench_deadline=$((SECONDS + bench_budget))
read -r -a bench_args <<<"${BENCH_ARGS:---batch=8 --length=2048 --variants=chunked,packed --jobs=2 --repeats=2}"
run_bench() {
  step env XLA_PYTHON_CLIENT_MEM_FRACTION=0.45 \
    timeout --kill-after=10 "$((bench_deadline - SECONDS + 30))" \
    "${py}" -m benchmarks.hf_ppo_bench "${bench_args[@]}" \
    --out=benchmarks/results/hf_ppo_bench_gpu.json \
    --budget_s="$((bench_deadline - SECONDS))"
}
run_bench || { echo "gpu_check: benchmark exit $?" >&2; status=1; }

# Compiled memory of the 0.5B actor step on one 32k-token row, chunked
# attention against cuDNN's fused kernel, blocks recomputed (remat full):
# the CPU analysis's 16.8 GiB (docs/benchmarks.md) as the GPU compiler
# plans it. Compiled only; ATTENTION_BUDGET_S (60 s) of the budget.
attention_budget="${ATTENTION_BUDGET_S:-60}"
step timeout --kill-after=10 "${attention_budget}" \
  "${py}" -m benchmarks.attention_bench --part=memory --lengths=32768 \
  --attentions=chunked,fused --remats=full --passes=actor_step \
  --out=benchmarks/results/attention_bench_gpu.json \
  || { echo "gpu_check: attention memory exit $?" >&2; status=1; }

# tests/conftest.py appends --xla_force_host_platform_device_count=8 to
# XLA_FLAGS (it only changes the CPU platform) and sets JAX_PLATFORMS=cpu
# with setdefault, so by default the tests would run on 8 fake CPU devices
# even here. JAX_PLATFORMS=cuda (set before pytest starts) wins over the
# setdefault: the model then runs on the one GPU and the CPU platform, and
# with it the 8-device flag, is never started. Tests that build a mesh of 8
# devices cannot run on one GPU and are deselected; CI runs them on CPU.
# float32 matmuls on the GPU default to TF32, which the tolerances (set on
# CPU) were not made for: highest precision keeps float32 float32. Workers
# share the GPU, so none may take 75% of its memory at start. conftest.py
# lowers XLA's backend optimisation to level 0 for the CPU suite's compile
# times unless a level is set: the GPU's kernels are compiled at XLA's
# default, 3, as a user's are.
tests=(tests/models/*_test.py tests/train/steps_test.py)
mesh_tests=(
  tests/models/sampler_sharding_test.py::test_state_shardings_split_rows_and_kv_heads
  tests/models/sampler_sharding_test.py::test_axes_that_do_not_divide_are_replicated
  tests/models/sampler_sharding_test.py::test_heads_stay_whole_when_rows_use_their_mesh_axis
  tests/models/sampler_sharding_test.py::test_a_missing_rule_raises
  tests/models/sampler_sharding_test.py::test_cache_is_made_and_kept_in_its_shardings
  tests/models/sampler_sharding_test.py::test_greedy_rollout_on_8_devices_equals_one_device
  tests/models/hf_import_test.py::test_tensors_land_in_their_shardings
  tests/models/hf_export_test.py::test_sharded_params_export
)
left=$((deadline - SECONDS))
if ((left < 30)); then
  echo "gpu_check: ${left} s left; the tests did not run." >&2
  exit 1
fi
step env JAX_PLATFORMS=cuda JAX_DEFAULT_MATMUL_PRECISION=highest \
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_backend_optimization_level=3 \
  timeout --kill-after=10 "${left}" \
  "${py}" -m pytest -n "${GPU_CHECK_TEST_WORKERS:-8}" -q "${tests[@]}" "${mesh_tests[@]/#/--deselect=}" \
  || { echo "gpu_check: tests exit $?" >&2; status=1; }

echo "gpu_check: done in $((SECONDS - deadline + budget)) s of ${budget} s (exit ${status})"
exit "${status}"
