"""The GPU lease's helpers (.ci/gpu/, docs/gpu.md): what they refuse before any device time is spent."""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
GPU = ROOT / ".ci" / "gpu"


def helper(script: str, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GPU / script), *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=60)


def fake_wheel(folder: Path, name: str, version: str, requires=()) -> Path:
    """A wheel file holding only its METADATA (name, version, Requires-Dist lines)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", metadata)
    return path


# ---- check_wheel_deps.py: every carried wheel's requirement is met on the image


def test_requirements_met_by_the_image_or_another_wheel(tmp_path):
    image = tmp_path / "image.txt"
    image.write_text("# the image\ntorch==2.11.0\neinops\n")
    wheels = [fake_wheel(tmp_path, "kernels", "1.0", ["torch>=2.7", "einops", "helper==0.3",
                                                     "datasets; extra == 'bench'", "old; python_version < '3.8'"]),
              fake_wheel(tmp_path, "helper", "0.3")]
    result = helper("check_wheel_deps.py", image, *wheels)
    assert result.returncode == 0, result.stderr
    assert "kernels 1.0: 5 requirements, all met on the image" in result.stdout


@pytest.mark.parametrize("requirement, why", [("einops", "neither carried nor in the image"),
                                              ("torch>=2.12", "the image has 2.11.0")])
def test_an_unmet_requirement_fails(tmp_path, requirement, why):
    image = tmp_path / "image.txt"
    image.write_text("torch==2.11.0\n")
    result = helper("check_wheel_deps.py", image, fake_wheel(tmp_path, "kernels", "1.0", [requirement]))
    assert result.returncode == 1
    assert f"error: kernels 1.0 needs {requirement}: {why}" in result.stderr


def test_no_carried_package_is_already_in_the_image():
    """The real lists stay apart: a package carried and in the image would be two versions of it
    (the wheels' own requirements are checked on the wheels by `make gpu-check-dry`)."""
    pins = [line.split("==")[0] for line in (GPU / "wheels.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    image = (GPU / "image-packages.txt").read_text()
    assert pins and all(f"\n{pin}" not in image for pin in pins), "a carried package is already in the image"
    assert "\ntorch==2.11.0\n" in image and "\ntriton==3.6.0\n" in image


# ---- outcome.py: the gpu tests' JUnit report


def junit(tmp_path: Path, cases: str) -> Path:
    path = tmp_path / "junit.xml"
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    return path


PASSED = '<testcase classname="tests.test_a" name="test_kernel"/>'
MAMBA_SKIP = '<testcase classname="tests.test_m" name="test_m"><skipped message="needs CUDA and mamba-ssm"/></testcase>'
CUDA_SKIP = '<testcase classname="tests.test_g" name="test_g"><skipped message="needs a CUDA device"/></testcase>'
FAILED = '<testcase classname="tests.test_b" name="test_b"><failure message="AssertionError: dx"/></testcase>'


@pytest.mark.parametrize("cases, allow, code", [
    (PASSED + MAMBA_SKIP, "mamba-ssm", 0),
    (PASSED + CUDA_SKIP, "mamba-ssm", 1),  # on the device, a kernel test that skips is a failure
    (CUDA_SKIP + MAMBA_SKIP, ".", 0),  # the dry run: every test skips
    (PASSED + FAILED, ".", 1),
    ("", ".", 1),  # no test ran
])
def test_outcome(tmp_path, cases, allow, code):
    result = helper("outcome.py", junit(tmp_path, cases), "--allow-skip", allow)
    assert result.returncode == code, result.stdout + result.stderr


def test_outcome_counts_and_names_what_did_not_pass(tmp_path):
    result = helper("outcome.py", junit(tmp_path, PASSED + FAILED + MAMBA_SKIP), "--allow-skip", "mamba-ssm")
    assert result.stdout.splitlines()[0] == "gpu tests: 1 passed, 1 failed, 0 error, 1 skipped"
    assert "FAILED tests.test_b::test_b: AssertionError: dx" in result.stdout


# ---- device_call.py: the device tool's call, within the tool's limits


@pytest.fixture
def checkout(tmp_path):
    """A git checkout holding the lease's files and the pinned wheels in .whl/ (ignored)."""
    shutil.copytree(ROOT / ".ci", tmp_path / ".ci")
    (tmp_path / ".gitignore").write_text(".whl/\n")
    for line in (GPU / "wheels.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            fake_wheel(tmp_path / ".whl", name, version)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return tmp_path


def test_device_call_is_printed_within_the_limits(checkout):
    result = helper("device_call.py", checkout)
    assert result.returncode == 0, result.stderr
    calls = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(calls) == 3  # the check, and two reruns to choose from
    for call in calls:
        assert call["carry"] == [".whl"] and len(call["command"]) <= 2000 and call["timeout_s"] <= 600
        assert call["command"].endswith(" bash .ci/gpu-check")
    assert calls[0]["timeout_s"] <= 480  # the first call: 8 minutes at most


def test_device_call_refuses_a_stale_wheel_folder(checkout):
    wheel = next((checkout / ".whl").glob("fla_core-*.whl"))
    wheel.rename(wheel.with_name("fla_core-0.5.2-py3-none-any.whl"))
    result = helper("device_call.py", checkout)
    assert result.returncode == 2
    assert "error: fla_core==0.6.0 is pinned in .ci/gpu/wheels.txt but not in .whl/" in result.stderr


def test_device_call_refuses_a_tree_over_64_mib(checkout):
    with open(checkout / "results.bin", "wb") as big:  # untracked, not ignored: it would travel
        big.truncate(65 * 2**20)
    result = helper("device_call.py", checkout)
    assert result.returncode == 2
    assert "MiB would travel, over 64 MiB" in result.stderr


def test_device_call_without_wheels_says_how_to_get_them(checkout):
    shutil.rmtree(checkout / ".whl")
    result = helper("device_call.py", checkout)
    assert result.returncode == 2
    assert "error: carried path .whl is missing: run `make gpu-wheels`" in result.stderr


# ---- .ci/torch-oldest: its Python runs under the current torch too (CI runs it only under 2.11)


def heredocs(script: Path) -> list[str]:
    """The Python programs a shell script feeds to ``python -`` between ``<<'PYEOF'`` and ``PYEOF``."""
    programs, lines, inside = [], [], False
    for line in script.read_text().splitlines():
        if line.rstrip().endswith("<<'PYEOF'"):
            inside, lines = True, []
        elif inside and line == "PYEOF":
            programs.append("\n".join(lines))
            inside = False
        elif inside:
            lines.append(line)
    return programs


def test_the_oldest_torch_smoke_lists_the_builtin_mixers(tmp_path):
    """The smoke's config step, run here with this venv's torch version: it names every built-in mixer
    (an attribute it reads went missing once, and CI failed on it)."""
    import torch
    import yaml

    from emergence_bench import registry

    write_config = heredocs(ROOT / ".ci" / "torch-oldest")[0]
    smoke = tmp_path / "smoke.yaml"
    result = subprocess.run([sys.executable, "-", torch.__version__.split("+")[0], str(smoke)], input=write_config,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    mixers = yaml.safe_load(smoke.read_text())["grid"]["mixer.name"]
    builtins = [n for n in registry.mixers.names()
                if registry.mixers.get(n).__module__.startswith("emergence_bench.mixers.")]
    assert sorted(mixers) == sorted(builtins) and len(mixers) >= 7
