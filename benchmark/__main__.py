"""`python -m emergence_bench ...`: the `emergence-bench` command (the same entry point as the console
script in pyproject.toml, for environments where the script is not on PATH)."""

import sys

from emergence_bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
