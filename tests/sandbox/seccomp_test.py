"""The job filter's program: both tables build, unknown machines refuse.

What the filter denies is tried by real jobs in isolation_test.py; this
checks the program itself, for the machine these tests cannot run on too.
"""

import errno
import struct

import pytest

from codeagent_rl.sandbox import seccomp


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_program_denies_every_call_of_the_table(machine):
  numbers = seccomp.syscall_numbers(machine)
  code = seccomp.program(machine)
  assert len(code) % 8 == 0 and len(code) // 8 < 256
  ops = [
    struct.unpack("=HBBI", code[i : i + 8]) for i in range(0, len(code), 8)
  ]
  compared = {k for op, _, _, k in ops if op == 0x15}  # jeq immediate
  for name in (*seccomp._DENIED, "fcntl", "setsockopt"):
    assert numbers[name] in compared, name
  # Distinct numbers: one table's typo cannot alias another call.
  assert len(set(numbers.values())) == len(numbers)
  returns = [k for op, _, _, k in ops if op == 0x06]
  assert returns[-2:] == [0x00050000 | errno.EPERM, 0x80000000]


def test_unknown_machine_is_refused():
  with pytest.raises(seccomp.FilterError) as e:
    seccomp.program("riscv64")
  assert e.value.errno == errno.ENOSYS and "riscv64" in str(e.value)
