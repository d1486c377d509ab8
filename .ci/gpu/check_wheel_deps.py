"""Every requirement of the wheels a GPU lease carries is met on the device's image.

A requirement is met by another carried wheel or by a package the image holds (IMAGE_LIST, one
``name`` or ``name==version`` a line), at a version that satisfies it where that version is known.
Markers are evaluated for the image's Python (3.12, Linux x86-64) with no extras. Prints one line
per wheel; exits 1 naming each requirement that is not met, so a wheel list that misses a
dependency fails CI (`make gpu-check-dry`), not the lease.

usage: python check_wheel_deps.py IMAGE_LIST WHEEL [WHEEL ...]
"""

from __future__ import annotations

import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

IMAGE_PYTHON = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
                "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def image_packages(path: Path) -> dict[str, Version | None]:
    """The image's packages: canonical name -> version (None where the list gives none)."""
    packages = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            packages[canonicalize_name(name)] = Version(version) if version else None
    return packages


def wheel_metadata(wheel: Path) -> tuple[str, Version, list[Requirement]]:
    """A wheel's (canonical name, version, requirements) from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        path = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(path).decode())
    requirements = [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]
    return canonicalize_name(metadata["Name"]), Version(metadata["Version"]), requirements


def unmet(requirement: Requirement, available: dict[str, Version | None]) -> str | None:
    """Why ``requirement`` is not met on the image, or None when it is (or does not apply there)."""
    if requirement.marker is not None and not requirement.marker.evaluate(IMAGE_PYTHON):
        return None
    name = canonicalize_name(requirement.name)
    if name not in available:
        return f"{requirement}: neither carried nor in the image"
    version = available[name]
    if version is not None and not requirement.specifier.contains(version, prereleases=True):
        return f"{requirement}: the image has {version}"
    return None


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(f"error: {__doc__.strip().splitlines()[-1]}", file=sys.stderr)
        return 2
    available = image_packages(Path(argv[0]))
    wheels = [wheel_metadata(Path(w)) for w in argv[1:]]
    available.update({name: version for name, version, _ in wheels})
    problems = []
    for name, version, requirements in wheels:
        missing = [why for r in requirements if (why := unmet(r, available))]
        print(f"{name} {version}: {len(requirements)} requirements, "
              + ("all met on the image" if not missing else f"{len(missing)} not met"))
        problems += [f"{name} {version} needs {why}" for why in missing]
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
