"""Jobs that carry files: a repository's workspace shipped into a fresh job.

Each job process writes the files into a scratch directory of its own,
imports its modules from there (calls) or runs one of them as a program,
and leaves nothing for the next job.
"""

import pytest

from codeagent_rl import status as status_lib
from codeagent_rl.sandbox import jobs

PACKAGE = (
  ("shop/__init__.py", ""),
  (
    "shop/prices.py",
    "from shop import tax\n\ndef total(x):\n  return tax.add(x)\n",
  ),
  ("shop/tax.py", "RATE = 2\n\ndef add(x):\n  return x * RATE\n"),
  (
    "cli.py",
    "import sys\nfrom shop import prices\n"
    "for line in sys.stdin:\n  print(prices.total(int(line)))\n",
  ),
  ("tools/run.py", "import helper\nprint(helper.NAME, __file__)\n"),
  ("tools/helper.py", "NAME = 'helper'\n"),
)


@pytest.fixture(params=["process", "gvisor"])
def pool(request):
  return request.getfixturevalue(f"{request.param}_pool")


def test_calls_import_the_workspace_modules(pool):
  job = jobs.Job.workspace_calls(
    PACKAGE, "shop.prices", "total", [([1], {}), ([5], {})]
  )
  result = pool.run(job)
  assert result.status == status_lib.JobStatus.OK, result.reason
  assert [t.output for t in result.tests] == [2, 10]


def test_a_program_runs_from_its_own_folder(pool):
  result = pool.run(jobs.Job.workspace_program(PACKAGE, "cli.py", ["3\n4\n"]))
  assert result.tests[0].stdout == "6\n8\n", result.stderr
  # `python tools/run.py` puts tools/ first on the path and names the file.
  result = pool.run(jobs.Job.workspace_program(PACKAGE, "tools/run.py"))
  assert result.tests[0].stdout == "helper tools/run.py\n", result.stderr


def test_a_traceback_names_the_workspace_file(pool):
  files = (
    ("m.py", "def f():\n  return 1 // 0\n"),
    ("main.py", "import m\nm.f()\n"),
  )
  result = pool.run(jobs.Job.workspace_program(files, "main.py"))
  assert result.tests[0].status == "error"
  assert 'm.py", line 2, in f' in result.stderr
  assert 'main.py", line 2, in <module>' in result.stderr


def test_an_import_that_fails_fails_every_test(pool):
  files = (("bad.py", "raise SystemExit(0)\ndef f(): return 1\n"),)
  result = pool.run(jobs.Job.workspace_calls(files, "bad", "f", [([], {})] * 2))
  assert [t.status for t in result.tests] == ["error", "error"]
  missing = pool.run(jobs.Job.workspace_calls(files, "absent", "f", [([], {})]))
  assert missing.tests[0].status == "error"
  assert "absent" in missing.tests[0].error


def test_a_workspace_module_named_solution_is_importable(pool):
  files = (("solution.py", "def f():\n  return 'mine'\n"),)
  result = pool.run(
    jobs.Job.workspace_calls(files, "solution", "f", [([], {})])
  )
  assert result.tests[0].output == "mine", result.tests[0].error


def test_nothing_of_one_jobs_files_is_there_for_the_next(pool):
  first = (
    ("secret.py", "VALUE = 'first job'\n"),
    ("a.py", "def f(): return 1\n"),
  )
  result = pool.run(jobs.Job.workspace_calls(first, "a", "f", [([], {})]))
  assert result.tests[0].output == 1
  probe = (
    (
      "probe.py",
      "import os, importlib.util\n"
      "def f():\n"
      "  return [sorted(os.listdir('.')),"
      " importlib.util.find_spec('secret') is None]\n",
    ),
  )
  result = pool.run(jobs.Job.workspace_calls(probe, "probe", "f", [([], {})]))
  assert result.tests[0].output == [["probe.py"], True]


def test_each_run_of_a_program_gets_fresh_files(pool):
  files = (
    (
      "main.py",
      "import os\nprint(sorted(os.listdir('.')))\n"
      "open('left.txt', 'w').write('x')\n"
      "open('data.py', 'a').write('# changed')\n"
      "print(open('data.py').read())\n",
    ),
    ("data.py", "X = 1\n"),
  )
  result = pool.run(jobs.Job.workspace_program(files, "main.py", ["", ""]))
  for test in result.tests:
    assert test.stdout == "['data.py', 'main.py']\nX = 1\n# changed\n"


@pytest.mark.parametrize(
  "path",
  ["/etc/x.py", "../x.py", "a/../../x.py", "a//b.py", "./a.py", "a\\b.py", ""],
)
def test_a_path_that_could_leave_the_scratch_directory_is_refused(path):
  with pytest.raises(ValueError, match="Job.files"):
    jobs.Job.workspace_calls(((path, "x = 1\n"),), "x", "f", [([], {})])


def test_bad_files_are_refused_before_a_job_exists():
  with pytest.raises(ValueError, match="twice"):
    jobs.Job.workspace_calls((("a.py", ""), ("a.py", "")), "a", "f", [])
  with pytest.raises(ValueError, match="no str"):
    jobs.Job.workspace_calls((("a.py", b"x"),), "a", "f", [])
  with pytest.raises(ValueError, match="not a dotted module path"):
    jobs.Job.workspace_calls((("a.py", ""),), "a;import os", "f", [])
  with pytest.raises(ValueError, match="not an identifier"):
    jobs.Job.workspace_calls((("a.py", ""),), "a", "f()", [])
  with pytest.raises(ValueError, match="not one of the files"):
    jobs.Job.workspace_program((("a.py", ""),), "b.py")
  many = tuple((f"m{i}.py", "") for i in range(jobs.MAX_FILES + 1))
  with pytest.raises(ValueError, match="at most"):
    jobs.Job.workspace_calls(many, "m0", "f", [])


def test_a_path_the_host_would_refuse_is_refused_in_the_guest_too(pool):
  # A job built around the host's checks (as a compromised host process
  # could send it): the guest writes nothing outside its directory.
  job = jobs.Job.workspace_calls((("ok.py", ""),), "ok", "f", [([], {})])
  object.__setattr__(job, "files", (("../escape.py", "X = 1\n"),))
  result = pool.run(job)
  assert result.tests[0].status == "error"
  assert "bad path" in result.tests[0].error


def test_a_file_too_large_for_the_job_is_a_failed_test_not_a_crash(pool):
  big = "x" * (9 << 20)  # the pools' largest file is 8 MiB
  files = (
    ("big.txt", big[: jobs.MAX_FILES_BYTES - 100]),
    ("a.py", "def f(): return 1\n"),
  )
  result = pool.run(jobs.Job.workspace_calls(files, "a", "f", [([], {})]))
  assert result.tests[0].output == 1  # 4 MiB fits
  job = jobs.Job.workspace_calls(
    (("a.py", "def f(): return 1\n"),), "a", "f", [([], {})]
  )
  object.__setattr__(
    job, "files", (("big.txt", big), ("a.py", "def f(): return 1\n"))
  )
  result = pool.run(job)
  assert result.tests[0].status in ("error", "output_limit")
  assert "writing the files failed" in result.tests[0].error
