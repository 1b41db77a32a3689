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
  "numpy>=2.0,<3",
  "optax>=0.2.5,<0.3",
  "orbax-checkpoint>=0.12,<0.13",
]

EXTRAS_REQUIRE = {
  # What `bash .ci/run` needs; ruff is pinned exactly because a formatter
  # release may reformat code and the lint test runs `ruff format --check`.
  "test": [
    "pytest>=8,<10",
    "pytest-xdist>=3.5,<4",
    "ruff==0.17.6",
    # tests/models/tokenizer_test.py builds tiny HF tokenizers.
    "tokenizers>=0.21,<0.24",
  ],
  # Hugging Face tokenizers (models/tokenizer.py HFTokenizer); the model
  # issue adds what HF import and parity tests need.
  "hf": [
    "tokenizers>=0.21,<0.24",
  ],
  # Sweep launchers (filled when launch/ gets executors).
  "launch": [],
}

setuptools.setup(
  name="codeagent_rl",
  version="0.1.0",
  description=(
    "PPO with a separate critic for code agents, pure sandbox rewards and"
    " two-stage anti-cheat, in JAX/Flax."
  ),
  python_requires=">=3.11",
  packages=setuptools.find_packages(include=["codeagent_rl", "codeagent_rl.*"]),
  install_requires=INSTALL_REQUIRES,
  extras_require=EXTRAS_REQUIRE,
)
