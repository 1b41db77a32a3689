"""`python -m codeagent_rl.sandbox`: the sandbox command line (`cli.py`)."""

from absl import app

from codeagent_rl.sandbox import cli

if __name__ == "__main__":
  cli.define_flags()
  app.run(cli.main)
