"""What a GPU check runs on: torch, CUDA, the GPU, and each kernel package's import.

Prints torch's version, CUDA's, the device, and for every built-in mixer with a kernel backend
whether its kernel module (the mixer module's ``KERNEL_MODULE``) imports, and from where. Exits 1
when the project or a carried package (CARRIED) imports from anywhere but SITE, the fresh folder the
carried wheels went into: a wheel missing from .whl/ that this Python happens to hold would pass
here and fail on the device. With ``--cuda``, also exits 1 when CUDA is not available.

usage: python environment.py SITE [--cuda]
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

CARRIED = ("emergence_bench", "fla", "mlstm_kernels")  # the project, and the wheels of .ci/gpu/wheels.txt


def origin(module: str) -> Path:
    return Path(importlib.import_module(module).__file__).resolve()


def kernel_modules() -> dict[str, str]:
    """Each built-in mixer with a kernel backend -> the module its kernel imports from."""
    from emergence_bench import registry

    kernels = {}
    for name in registry.mixers.names():
        cls = registry.mixers.get(name)
        if cls.__module__.startswith(f"{registry.mixers.builtins}.") and "kernel" in getattr(cls, "backends", ()):
            kernels[name] = getattr(importlib.import_module(cls.__module__), "KERNEL_MODULE", "?")
    return kernels


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("error: usage: python environment.py SITE [--cuda]", file=sys.stderr)
        return 2
    site, need_cuda = Path(argv[0]).resolve(), "--cuda" in argv[1:]
    import torch

    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name(0) if cuda else "none"
    print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), GPU: {device}")
    problems = []
    for module in CARRIED:
        try:
            path = origin(module)
        except Exception as error:  # a broken wheel fails here, whatever it raises
            problems.append(f"{module} does not import: {type(error).__name__}: {error}")
            continue
        print(f"  {module} from {path.parent}")
        if site not in path.parents:
            problems.append(f"{module} imports from {path.parent}, not from the carried wheels in {site}")
    for mixer, module in kernel_modules().items():
        try:
            importlib.import_module(module)
            status = "imports"
        except Exception as error:
            status = f"does not import ({type(error).__name__}: {str(error).splitlines()[0][:120]})"
        print(f"  {mixer} kernel: {module} {status}")
    if need_cuda and not cuda:
        problems.append("CUDA is not available: every gpu test would skip")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
