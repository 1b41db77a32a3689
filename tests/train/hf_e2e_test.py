"""Post-training a Hugging Face checkpoint end to end, as the README says.

Real artefacts made here (tests/helpers/hf_checkpoints.py): tiny random
Qwen2 and Llama checkpoints saved by `transformers` with a ChatML
byte-level BPE tokenizer and template. Task data: MBPP-shaped records
converted by `python -m codeagent_rl.tasks.convert`. Then the documented
command with `configs/hf.py:smoke` trains 2 PPO iterations through the
process sandbox, a second call resumes without new iterations, and
`python -m codeagent_rl.export_hf` writes a checkpoint `transformers`
loads. In process: a rollout's sampled log-probs equal `transformers`' on
the same ids, and the stitched ids decode to the rendered conversation.
"""

import json
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
import torch
import transformers

from codeagent_rl.envs import code_env
from codeagent_rl.models import chat
from codeagent_rl.models import hf_import
from codeagent_rl.rollout import agent_loop
from codeagent_rl.tasks import schema
from codeagent_rl.train import evaluate as eval_lib
from codeagent_rl.train import experiment
from configs import hf as hf_config
from tests.helpers import hf_checkpoints
from tests.helpers import policies
from tests.helpers import processes

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
MBPP = [
  ("add", "Write a function to add two numbers.", "a + b", [(1, 2), (3, 4)]),
  ("sub", "Write a function to subtract b from a.", "a - b", [(5, 2), (1, 1)]),
  ("mul", "Write a function to multiply two numbers.", "a * b", [(2, 3)]),
  ("big", "Write a function to return the larger.", "max(a, b)", [(1, 9)]),
  ("low", "Write a function to return the smaller.", "min(a, b)", [(4, 2)]),
  ("avg", "Write a function to average two numbers.", "(a + b) / 2", [(2, 4)]),
]


def _run(*args, timeout=600):
  proc = subprocess.run(
    [sys.executable, "-m", *args],
    cwd=REPO_ROOT,
    env=processes.one_device_env(),
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return proc.stdout


def _mbpp_file(path, rows):
  with open(path, "w") as f:
    for name, text, expr, pairs in rows:
      record = {
        "task_id": 11 + [r[0] for r in MBPP].index(name),
        "text": text,
        "code": f"def {name}(a, b):\n    return {expr}\n",
        "test_list": [
          f"assert {name}({a}, {b}) == {eval(expr, {}, {'a': a, 'b': b})!r}"
          for a, b in pairs
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
      }
      f.write(json.dumps(record) + "\n")
  return path


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
  """(train.jsonl, eval.jsonl) converted from MBPP-shaped records."""
  root = tmp_path_factory.mktemp("tasks")
  out = []
  for name, rows in (("train", MBPP[:4]), ("eval", MBPP[4:])):
    raw = _mbpp_file(root / f"{name}_mbpp.jsonl", rows)
    _run(
      "codeagent_rl.tasks.convert",
      "--format=mbpp",
      f"--input={raw}",
      f"--out={root / name}.jsonl",
      "--norun_references",
    )
    out.append(root / f"{name}.jsonl")
  return tuple(out)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
  return hf_checkpoints.save_checkpoint(tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="module")
def documented_run(tmp_path_factory, tasks, qwen_dir):
  """The README's train command, run twice (the second resumes), and export."""
  workdir = tmp_path_factory.mktemp("run") / "w"
  train, held_out = tasks
  command = (
    "codeagent_rl.main",
    "--config=configs/hf.py:smoke",
    f"--config.hf_checkpoint_dir={qwen_dir}",
    f"--config.data.train_tasks={train}",
    f"--config.data.eval_tasks={held_out}",
    f"--workdir={workdir}",
    "--sandbox_backend=process",
  )
  first = _run(*command)
  again = _run(*command)
  humaneval = _run(
    "codeagent_rl.main",
    "--config=configs/eval_humaneval.py:hf:smoke",
    f"--config.hf_checkpoint_dir={qwen_dir}",
    "--config.humaneval.num_tasks=2",
    f"--workdir={workdir}",
    "--sandbox_backend=process",
  )
  out = workdir.parent / "export"
  exported = _run(
    "codeagent_rl.export_hf", f"--workdir={workdir}", f"--out={out}"
  )
  return workdir, out, first, again, humaneval + exported


def test_the_documented_command_trains_resumes_and_exports(
  documented_run, qwen_dir
):
  workdir, out, first, again, exported = documented_run
  rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  assert [r["iteration"] for r in rows] == [0, 1]
  assert all(np.isfinite(r["loss/critic"]) for r in rows)
  assert all(0.0 <= r["episode/render_mismatch"] <= 1.0 for r in rows)
  assert "it 2/2" in first and "PPO final (greedy)" in first
  assert "it 1/2" not in again  # resumed: nothing trained twice
  # Value pre-training ran before PPO, once (the resumed run skips it).
  assert "value pretrain 2/2" in first and "value pretrain" not in again
  pretrain = [
    json.loads(line) for line in open(workdir / "value_pretrain.jsonl")
  ]
  assert [r["round"] for r in pretrain] == [0, 1]
  assert all(np.isfinite(r["loss/critic"]) for r in pretrain)
  # No SFT: the run started from the checkpoint, its KL reference too.
  assert re.search(rf"SFT checkpoint:\s+{re.escape(str(qwen_dir))}\n", first)
  saved = json.loads((workdir / "config.json").read_text())
  assert saved["hf_checkpoint_dir"] == str(qwen_dir)
  assert "evaluating PPO iteration 2" in exported  # HumanEval, then export
  assert "HumanEval (2 problems, greedy): pass@1" in exported
  assert "restored the actor of PPO iteration 2" in exported
  # What transformers loads: the trained actor with the checkpoint's
  # tokenizer and template.
  model = transformers.AutoModelForCausalLM.from_pretrained(out)
  tok = transformers.AutoTokenizer.from_pretrained(out)
  assert tok.chat_template == hf_checkpoints.CHATML_TEMPLATE
  assert model.config.model_type == "qwen2"


def _rollout(checkpoint, train_file, pool):
  """One sampled rollout of 4 episodes; (exp, rollout, log-probs per row)."""
  config = hf_config.get_config("smoke")
  config.hf_checkpoint_dir = str(checkpoint)
  config.data.train_tasks = str(train_file)
  exp = experiment.Experiment.from_config(config)
  params = hf_import.load_params(checkpoint, exp.model)  # default device
  fmt = exp.conversation
  env = code_env.CodeEnv(pool, fmt, exp.env)
  tasks = schema.read_tasks(train_file)
  sampler = eval_lib.make_sampler(exp, exp.sampling.temperature)
  longest = max(len(env.reset(t).prompt_ids) for t in tasks)
  policy = policies.LogProbRecorder(
    agent_loop.SamplerPolicy(
      sampler, params, fmt, agent_loop.cache_len_for(exp.env, longest, fmt)
    )
  )
  rollout = agent_loop.collect(
    env, policy, tasks, list(range(len(tasks))), jax.random.key(7)
  )
  return exp, rollout, policy.log_probs


@pytest.mark.parametrize("model_type", ["qwen2", "llama"])
def test_sampled_log_probs_equal_transformers(
  tmp_path, tasks, module_pool, model_type
):
  checkpoint = hf_checkpoints.save_checkpoint(
    tmp_path / model_type, model_type=model_type, tie_embeddings=False
  )
  exp, rollout, log_probs = _rollout(checkpoint, tasks[0], module_pool)
  model = transformers.AutoModelForCausalLM.from_pretrained(
    checkpoint, attn_implementation="eager"
  ).eval()
  limit = exp.conversation.vocab_size
  batch = rollout.batch
  checked = 0
  for row in range(batch.tokens.shape[0]):
    n = int(batch.length[row])
    ids = torch.tensor(batch.tokens[row, :n][None].astype(np.int64))
    with torch.no_grad():
      logits = model(ids).logits[0].float().numpy()
    # The sampler draws only the tokenizer's ids (the embedding is padded).
    logits = logits[:, :limit]
    logp = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    positions = np.flatnonzero(batch.trainable[row, :n])
    theirs = logp[positions - 1, batch.tokens[row, positions]]
    np.testing.assert_allclose(log_probs[row], theirs, atol=1e-4)
    checked += positions.size
  assert checked > 0


def test_stitched_ids_decode_to_the_rendered_conversation(
  tmp_path, tasks, module_pool, qwen_dir
):
  exp, rollout, _ = _rollout(qwen_dir, tasks[0], module_pool)
  fmt = exp.conversation
  tok = transformers.AutoTokenizer.from_pretrained(qwen_dir)
  batch = rollout.batch
  for row, episode in enumerate(rollout.episodes):
    ids = batch.tokens[row, : batch.length[row]].tolist()
    messages = agent_loop.episode_messages(fmt, episode)
    rendered = tok.apply_chat_template(messages, tokenize=False)
    text = tok.decode(ids)
    if not text.endswith("<|im_end|>"):
      text += "<|im_end|>"  # the last action was cut by the budget
    assert text + "\n" == rendered
    # The environment's own check agrees when the text round-trips.
    ok = chat.check_episode(fmt, messages, ids, "ignore_whitespace")
    assert ok
