"""The memory policy (emergence_bench.machine.allocator): a large block freed and allocated again is reused,
so it costs no fresh page faults, which is what made K seeds' stacked activations slow."""

import subprocess
import sys

import pytest

from emergence_bench.machine.allocator import keep_freed_memory

# Ten forward + backward steps of one batched matmul of K=4 seeds' activations (35 MB an output),
# printing the minor page faults they cost.
FAULTS = """
import resource, sys, torch
torch.set_num_threads(1)
if sys.argv[1] == "kept":
    from emergence_bench.machine.allocator import keep_freed_memory
    assert keep_freed_memory().startswith("glibc"), keep_freed_memory()
x = torch.randn(4, 4352, 128, requires_grad=True)
w = torch.randn(4, 128, 512, requires_grad=True)
def step():
    torch.bmm(x, w).relu().sum().backward()
step()  # the first step faults in any case
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(not keep_freed_memory().startswith("glibc"), reason="glibc's malloc only")
def test_large_blocks_are_reused_not_faulted_in_again():
    default, kept = faults("default"), faults("kept")
    assert default > 10 * (35 << 20) // 4096  # the defaults: each step's large outputs fault in afresh
    assert kept * 3 < default


def test_policy_is_decided_once_and_says_what_it_did():
    first = keep_freed_memory()
    assert first == keep_freed_memory() and first  # idempotent, and never empty
