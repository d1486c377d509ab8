"""`emergence-bench run`: one experiment, from a config file and flags; with ``--seed-parallel K``,
K seeds of it trained together."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from emergence_bench.commands.arguments import (
    BATCHING_HELP,
    CONFIG_FLAGS,
    THREADS_HELP,
    config_overrides,
    results_folder,
    threads,
)
from emergence_bench.commands.command import Subparsers, register_command
from emergence_bench.config import Batching
from emergence_bench.results.row import emergence_step, section

if TYPE_CHECKING:
    from emergence_bench.engine.run import RunPlan


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    # No abbreviations: `--seed 3` is a config key, never short for `--seed-parallel`.
    parser = subparsers.add_parser("run", allow_abbrev=False,
                                   help="run one experiment; any config key can follow as --dotted.key VALUE",
                                   description="Run one experiment: the built-in defaults, or --config FILE, with "
                                               "config keys as flags on top. " + CONFIG_FLAGS)
    parser.add_argument("--config", help="a run config YAML (default: the built-in defaults)")
    parser.add_argument("--out", default="runs", help="results directory (default: runs)")
    parser.add_argument("--seed-parallel", type=int, default=1, metavar="K",
                        help="train seeds s..s+K-1 together as one batched model (one result each)")
    parser.add_argument("--batching", choices=get_args(Batching), default="auto", help=BATCHING_HELP)
    parser.add_argument("--threads", type=threads, metavar="N|auto", help=THREADS_HELP)
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved config as YAML (every default filled in) and exit; "
                             "`run --config` on it gives the same run id")
    return parser


def main(args: argparse.Namespace, extra: list[str]) -> int:
    from emergence_bench.config import ConfigError, dump_yaml, load_yaml, resolve, set_dotted

    data = load_yaml(args.config) if args.config else {}
    for key, value in config_overrides(extra).items():
        set_dotted(data, key, value)
    if args.threads is not None:
        set_dotted(data, "trainer.threads", args.threads)
    config = resolve(data)  # the one resolve: a typo is refused here, before Lightning loads

    from emergence_bench.engine.run import plan, run
    from emergence_bench.machine.devices import accelerator_device
    from emergence_bench.machine.threads import choose_threads
    from emergence_bench.measurements.emergence import EMERGENCE
    from emergence_bench.measurements.plateau import PLATEAU
    from emergence_bench.results.store import RESULT_FILE

    planned = plan(config)  # checked and sized once: the run (or the group's first seed) trains on it
    if args.print_config:
        print(dump_yaml(config.to_dict()), end="")
        return 0
    if accelerator_device(config.trainer.accelerator) is None:
        raise ConfigError(f"trainer.accelerator {config.trainer.accelerator}: torch sees no CUDA device on this "
                          "machine (choose cpu or auto; a GPU needs torch's CUDA build: make clean, then "
                          "make install TORCH=cuda)")
    if config.trainer.eval_every > config.trainer.max_steps:
        print(f"warning: trainer.eval_every {config.trainer.eval_every} > trainer.max_steps "
              f"{config.trainer.max_steps}: the run never evaluates, so it records no eval loss and no emergence "
              "step (lower --trainer.eval_every)", file=sys.stderr)
    choose_threads(config.trainer.threads, 0.0)  # a count above this machine's cores fails before anything runs
    results_folder(args.out)
    if args.seed_parallel > 1:
        return _run_seeds(planned, args)
    print(f"run {config.run_id()} → {Path(args.out) / config.run_id()}", file=sys.stderr)
    record = run(planned, args.out, progress=True)
    e, p, m = EMERGENCE.read(record), PLATEAU.read(record), section(record, "metrics")
    print(f"status {record['status']}" + (f": {record['error'].splitlines()[0]}" if record["error"] else ""))
    if record["status"] != "failed":
        print(f"emergence step {e.get('step')} (accuracy ≥ {e.get('threshold')})  "
              f"plateau end {p.get('end_step')}{' (worth the name)' if p.get('worth') else ''}  "
              f"first drop {p.get('first_drop_step')} (loss < {p.get('threshold', 0):.3f})  "
              f"final eval loss {m.get('final_eval_loss')}  steps/s {record['timing']['steps_per_second']}  "
              f"threads {record.get('threads')}")
    print(f"result: {Path(args.out) / config.run_id() / RESULT_FILE}")
    return 1 if record["status"] == "failed" else 0


def _run_seeds(first: RunPlan, args: argparse.Namespace) -> int:
    """`run --seed-parallel K`: seeds s, s+1, ..., s+K-1 of the planned config, trained together."""
    from emergence_bench.engine.run import plan
    from emergence_bench.engine.seed_parallel import run_seed_parallel
    from emergence_bench.results.store import RESULT_FILE

    seed = first.config.seed
    # Each other seed's config is its own: resolved and planned once, here.
    plans = [first] + [plan({**first.config.to_dict(), "seed": seed + k}) for k in range(1, args.seed_parallel)]
    print(f"run seeds {seed}..{plans[-1].config.seed} together → {args.out}", file=sys.stderr)
    records = run_seed_parallel(plans, args.out, progress=True, batching=args.batching)
    for record in records:
        note = section(record, "seed_parallel")
        how = f"sequential: {note['fallback']}" if note.get("fallback") else f"batched, k={note.get('k')}"
        print(f"seed {record['seed']}: status {record['status']}  emergence step {emergence_step(record)}  "
              f"({how})  result: {Path(args.out) / record['run_id'] / RESULT_FILE}")
    return 1 if any(r["status"] == "failed" for r in records) else 0


register_command("run", add_parser, main)
