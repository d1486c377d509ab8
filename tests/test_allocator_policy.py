"""The allocator policy has an opt-out (config key and environment variable) and is recorded."""

import os
import subprocess
import sys

import pytest

# A fresh process per case: the policy is decided once per process.
PROBE = """
import json, sys
from emergence_bench.engine.run import run
config = {  # conftest's tiny_config(trainer={"keep_freed_memory": ...}): a subprocess takes no fixtures
    "seed": 0,
    "task": {"name": "linear_map", "state_size": 4, "sparsity": 2, "batch_size": 32},
    "mixer": {"name": "transformer", "n_heads": 2, "head_dim": 4},
    "model": {"d_model": 16, "n_layers": 1, "mlp_ratio": 2},
    "trainer": {"max_steps": 20, "eval_every": 10, "eval_batches": 1, "accelerator": "cpu",
                "keep_freed_memory": sys.argv[2] == "keep"},
}
record = run(config, sys.argv[1])
print(json.dumps(record["provenance"]["allocator"]))
"""


def policy(tmp_path, config: str, env_value: str | None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "EMERGENCE_BENCH_KEEP_FREED_MEMORY"}
    if env_value is not None:
        env["EMERGENCE_BENCH_KEEP_FREED_MEMORY"] = env_value
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path), config], capture_output=True, text=True,
                          env=env, timeout=300)
    return done.returncode, (done.stdout.strip().splitlines() or [""])[-1] + done.stderr[-300:]


@pytest.mark.slow
def test_opt_out_by_config_and_by_environment_and_the_result_says_which(tmp_path):
    code, kept = policy(tmp_path / "a", "keep", None)
    assert code == 0 and ("glibc: freed memory kept" in kept or "allocator defaults (no glibc" in kept), kept
    code, by_config = policy(tmp_path / "b", "release", None)
    assert code == 0 and "opted out: trainer.keep_freed_memory false" in by_config, by_config
    code, by_env = policy(tmp_path / "c", "keep", "0")  # the environment wins over the config
    assert code == 0 and "opted out: EMERGENCE_BENCH_KEEP_FREED_MEMORY=0" in by_env, by_env


def test_a_bad_environment_value_is_named(monkeypatch):
    from emergence_bench.machine import allocator

    monkeypatch.setattr(allocator, "_policy", None)
    monkeypatch.setenv("EMERGENCE_BENCH_KEEP_FREED_MEMORY", "maybe")
    with pytest.raises(ValueError, match="EMERGENCE_BENCH_KEEP_FREED_MEMORY='maybe'"):
        allocator.keep_freed_memory()


def test_the_key_is_not_part_of_the_run_id(tiny_config):
    from emergence_bench.config import resolve

    assert resolve(tiny_config(trainer={"keep_freed_memory": False})).run_id() == resolve(tiny_config()).run_id()
