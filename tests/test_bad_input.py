"""Bad input, as a new user types it: every mistake ends within seconds, non-zero, with one line that
names the problem, and never a traceback. One table of command lines and files; each row is a case.
Below it, the categories of mistake each generated over every registered command it applies to: a
command line of the wrong shape, flags before the command, an empty value, a number that is not
finite, a reference that is not one, a read-only results folder, a flag that would be dropped or
would quietly change what is run, a comparison that fails after the ranking it replaces, a row whose
section is null, a ranking cell of two settings (budgets), a folder to read that does not exist, and
a command that fails at its last file (nothing it wrote before may be overwritten)."""

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from emergence_bench.cli import EXIT_BAD_INPUT, main
from emergence_bench.commands import COMMANDS
from emergence_bench.commands.arguments import WORKERS_PER_CORE, finite

SECONDS = 30  # each case must end well within this; the slowest builds one model


def files(tmp_path):
    """The bad (and good) files the cases name, written into tmp_path."""
    (tmp_path / "syntax.yaml").write_text("task: {name: linear_map\nmixer: [\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "sweep-syntax.yaml").write_text("name: s\ngrid: {seed: [0, 1}\n")
    (tmp_path / "sweep-grid.yaml").write_text("name: s\ngrid: {seed: 3}\n")
    (tmp_path / "sweep-groups.yaml").write_text("name: s\ngroups: [1, 2]\n")
    (tmp_path / "sweep-key.yaml").write_text("name: s\nbsae: {}\n")
    (tmp_path / "a-file").write_text("not a folder")
    results = tmp_path / "results" / "run-1"
    results.mkdir(parents=True)
    (results / "result.json").write_text('{"schema_version": 2, "run_id": "run-1", "sta')
    (tmp_path / "empty").mkdir()
    (tmp_path / "curriculum.yaml").write_text(json.dumps({"curriculum": [{"task": {"name": "nope"}, "steps": 5}]}))
    (tmp_path / "twice.yaml").write_text("optim:\n  lr: 1.0e-3\n  lr: 3.0e-3\n")
    (tmp_path / "sweep-repeat.yaml").write_text("name: s\ngrid: {seed: [0, 1, 0]}\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "comments.yaml").write_text("# a config, one day\n")
    (tmp_path / "not-gzip.json.gz").write_bytes(bytes(range(256)) * 4)  # binary garbage
    (tmp_path / "a-config.yaml").write_text("task: {name: linear_map}\n")  # a YAML file as a reference
    full = gzip.compress(json.dumps({"format": 1, "rows": [{"run_id": "x"}] * 200}).encode())
    (tmp_path / "cut-short.json.gz").write_bytes(full[: len(full) // 2])  # a download cut short
    (tmp_path / "a-list.json.gz").write_bytes(gzip.compress(b"[1, 2]"))
    (tmp_path / "not-json.json.gz").write_bytes(gzip.compress(b"name: x\n"))
    (tmp_path / "not-utf8.json.gz").write_bytes(gzip.compress(b"\xff\xfe{}"))
    (tmp_path / "a-part.json.gz").write_bytes(gzip.compress(json.dumps({"format": 1, "preset": "x"}).encode()))
    two_runs(tmp_path / "two-runs")
    edited_copy(tmp_path / "two-runs", tmp_path / "null-metrics", {"metrics": None})
    three_runs(tmp_path / "two-runs", tmp_path / "three-runs")
    claims_rows(tmp_path / "claims-rows")
    edited_copy(tmp_path / "two-runs", tmp_path / "two-budgets", {"config.trainer.max_steps": 20})
    for arm in ("with-conv", "without-conv"):  # the two runs in each of two groups: arms to compare
        shutil.copytree(tmp_path / "two-runs", tmp_path / "two-arms" / arm)


def three_runs(folder, copy) -> None:
    """``folder``'s two runs and a third seed of the second, two of the three emerged: a fleet to forecast."""
    shutil.copytree(folder, copy)
    paths = sorted(copy.glob("*/result.json"))
    rows = [json.loads(p.read_text()) for p in paths]
    third = {**rows[1], "seed": 2, "run_id": rows[1]["run_id"] + "-2", "config": {**rows[1]["config"], "seed": 2}}
    paths.append(copy / third["run_id"] / "result.json")
    paths[-1].parent.mkdir()
    for path, row, step in zip(paths, [*rows, third], (8, None, 10)):
        path.write_text(json.dumps({**row, "emergence": {**row["emergence"], "step": step}}))


def claims_rows(folder) -> None:
    """Hand-made rows of the claims' emergence and bias groups (test_claims): a folder `claims` judges."""
    from test_claims import bias_rows

    from emergence_bench.results.store import SCHEMA_VERSION

    for group, rows in bias_rows(plateau=100).items():
        for row in rows:
            (folder / group / row["run_id"]).mkdir(parents=True)
            (folder / group / row["run_id"] / "result.json").write_text(json.dumps(
                {"schema_version": SCHEMA_VERSION, "error": None, "backend": None, "device": None, "threads": 1,
                 "versions": {}, "started_at": "", **row}))


def edited_copy(folder, copy, changes: dict) -> None:
    """``folder`` copied to ``copy``, its first row changed at each dotted key of ``changes``."""
    shutil.copytree(folder, copy)
    path = sorted(copy.glob("*/result.json"))[0]
    row = json.loads(path.read_text())
    for key, value in changes.items():
        *parents, last = key.split(".")
        holder = row
        for part in parents:
            holder = holder[part]
        holder[last] = value
    path.write_text(json.dumps(row))


def two_runs(out):
    """Two finished runs equal but for the seed (a fleet too small to forecast)."""
    from emergence_bench.engine.run import run

    for seed in (0, 1):
        run({"seed": seed, "task": {"name": "linear_map", "state_size": 4, "sparsity": 2, "batch_size": 16},
             "mixer": {"name": "transformer", "n_heads": 2, "head_dim": 4},
             "model": {"d_model": 16, "n_layers": 1, "mlp_ratio": 2},
             "trainer": {"max_steps": 10, "eval_every": 5, "eval_batches": 1, "accelerator": "cpu"}}, out)


# (case, command line with {tmp} for the folder, words the error line must contain)
CASES = [
    # config files
    ("yaml syntax", ["run", "--config", "{tmp}/syntax.yaml"], ["syntax.yaml", "YAML"]),
    ("yaml not a mapping", ["run", "--config", "{tmp}/list.yaml"], ["list.yaml", "mapping"]),
    ("missing config", ["run", "--config", "{tmp}/nope.yaml"], ["nope.yaml", "not found"]),
    ("a folder as the config", ["run", "--config", "{tmp}/empty"], ["empty is a folder", "not a config file"]),
    ("an empty config", ["run", "--config", "{tmp}/empty.yaml"], ["empty.yaml", "holds no config"]),
    ("a config of comments", ["run", "--config", "{tmp}/comments.yaml"], ["comments.yaml", "holds no config"]),
    ("an empty sweep file", ["sweep", "{tmp}/empty.yaml"], ["empty.yaml", "holds no config"]),
    ("a folder as the sweep", ["sweep", "{tmp}/empty"], ["empty is a folder", "preset name", "sweep YAML file"]),
    # one bad value in every config section
    ("seed", ["run", "--seed", "-1"], ["seed", "-1"]),
    ("seed type", ["run", "--seed", "abc"], ["seed"]),
    ("task key", ["run", "--task.sparsty", "2"], ["task.sparsty", "sparsity"]),
    ("task value", ["run", "--task.sparsity", "99"], ["sparsity"]),
    ("task name", ["run", "--task.name", "linear_mop"], ["linear_mop", "linear_map"]),
    ("mixer key", ["run", "--mixer.n_head", "2"], ["mixer.n_head", "n_heads"]),
    ("mixer name", ["run", "--mixer.name", "transfomer"], ["transfomer", "transformer"]),
    ("mixer value", ["run", "--mixer.n_heads", "0"], ["n_heads"]),
    ("model", ["run", "--model.d_model", "-4"], ["d_model"]),
    ("optim", ["run", "--optim.lr", "-1"], ["lr"]),
    ("optim betas not two", ["run", "--optim.betas", "[0.9]"], ["optim.betas", "two numbers", "[0.9]"]),
    ("optim beta out of range", ["run", "--optim.betas", "[0.9, 1.5]"], ["optim.betas", "[0, 1)"]),
    ("a fixed key set to null", ["run", "--optim.betas", "null"], ["optim.betas must be set, got null"]),
    ("a fixed key set to null in a sweep", ["sweep", "quick", "--trainer.max_steps", "null"],
     ["trainer.max_steps must be set, got null"]),
    ("task too large to build", ["run", "--task.state_size", "100000000000"],
     ["task 'linear_map'", "state_size=100000000000", "too large"]),
    ("trainer", ["run", "--trainer.max_steps", "0"], ["max_steps"]),
    ("trainer threads", ["run", "--threads", "999"], ["threads"]),
    ("callbacks key", ["run", "--callbacks.plateu.frac", "0.1"], ["plateu", "plateau"]),
    ("callbacks value", ["run", "--callbacks.plateau.frac", "2"], ["frac"]),
    ("callbacks bias layer", ["run", "--callbacks.attention_bias", "{layers: [5]}"], ["layers", "5"]),
    ("checkpoints", ["run", "--checkpoints.every", "-3"], ["checkpoints.every"]),
    ("curriculum", ["run", "--config", "{tmp}/curriculum.yaml"], ["nope"]),
    ("curriculum a string", ["run", "--curriculum", "foo"], ["curriculum must be a list", "'foo'"]),
    ("curriculum a mapping", ["run", "--curriculum", "{task: {name: linear_map}, steps: 5}"],
     ["curriculum must be a list"]),
    ("callbacks a string", ["run", "--callbacks", "plateau"], ["callbacks must be a mapping", "'plateau'"]),
    ("a callback a number", ["run", "--callbacks.plateau", "3"], ["callbacks.plateau must be a mapping", "3"]),
    ("task name misspelt", ["run", "--task.nmae", "linear_map"], ["task.nmae", "did you mean 'name'"]),
    ("mixer name misspelt", ["run", "--mixer.nmae", "lru"], ["mixer.nmae", "did you mean 'name'"]),
    ("stage task name misspelt", ["run", "--curriculum", "[{task: {nmae: linear_map}, steps: 5}]"],
     ["curriculum[0].task.nmae", "did you mean 'name'"]),
    ("flag without value", ["run", "--task.sparsity"], ["--task.sparsity", "value"]),
    ("stray argument", ["run", "oops"], ["oops"]),
    ("yaml key twice", ["run", "--config", "{tmp}/twice.yaml"], ["twice.yaml", "line 3", "'lr'", "twice"]),
    ("flag value key twice", ["run", "--mixer", "{name: transformer, name: lru}"], ["'name'", "twice"]),
    ("flag value not yaml", ["run", "--mixer", "{name: transformer"], ["{name: transformer", "YAML"]),
    # folders
    ("out under a file", ["run", "--out", "{tmp}/a-file/sub", "--trainer.max_steps", "1"], ["a-file"]),
    ("sweep out under a file", ["sweep", "quick", "--out", "{tmp}/a-file/sub"], ["a-file"]),
    ("leaderboard of nothing", ["leaderboard", "{tmp}/nowhere"], ["nowhere"]),
    ("report of an empty folder", ["report", "{tmp}/empty"], ["empty"]),
    ("rank of an empty folder", ["rank", "{tmp}/empty"], ["no results"]),
    ("leaderboard baseline no row has", ["leaderboard", "{tmp}/two-runs", "--baseline", "mixer=transformr"],
     ["transformr", "transformer"]),
    ("leaderboard over no key", ["leaderboard", "{tmp}/two-runs", "--over", "seed,task.sparsty"],
     ["task.sparsty", "task.sparsity"]),
    ("report of a seed no run has", ["report", "{tmp}/two-runs", "--seed", "99"], ["--seed 99", "seeds"]),
    ("report with negative maps", ["report", "{tmp}/two-runs", "--maps", "-1"], ["--maps"]),
    ("report against a reference of another ladder", ["report", "{tmp}/two-runs", "--reference", "builtin"],
     ["--reference builtin", "does not apply"]),
    ("report against no such reference", ["report", "{tmp}/two-runs", "--reference", "nosuch"], ["nosuch"]),
    ("claims of an empty folder", ["claims", "{tmp}/empty"], ["no readable results"]),
    ("claims of an unknown claim", ["claims", "{tmp}/two-runs", "--claim", "abupt"], ["abupt", "abrupt"]),
    ("forecast of two runs", ["forecast", "{tmp}/two-runs", "--window", "5"], ["at least 3 runs", "all runs: 2"]),
    # results
    ("corrupt result, strict leaderboard", ["leaderboard", "{tmp}/results", "--strict"], ["run-1", "result.json"]),
    ("corrupt result, strict report", ["report", "{tmp}/results", "--strict"], ["run-1", "result.json"]),
    ("corrupt result, strict rank", ["rank", "{tmp}/results", "--strict"], ["run-1", "result.json"]),
    # sweeps
    ("no workers", ["sweep", "quick", "--workers", "0"], ["--workers"]),
    ("negative seed-parallel", ["sweep", "quick", "--seed-parallel", "0"], ["--seed-parallel"]),
    ("unknown preset", ["sweep", "quik"], ["quik", "quick"]),
    ("unknown group", ["sweep", "quick", "--group", "nope"], ["nope"]),
    ("unknown mixers", ["sweep", "quick", "--mixers", "transfomer", "--dry-run"], ["transfomer"]),
    ("sweep yaml syntax", ["sweep", "{tmp}/sweep-syntax.yaml"], ["sweep-syntax.yaml", "YAML"]),
    ("sweep grid not a list", ["sweep", "{tmp}/sweep-grid.yaml"], ["grid.seed"]),
    ("sweep groups not mappings", ["sweep", "{tmp}/sweep-groups.yaml"], ["groups[0]"]),
    ("sweep key", ["sweep", "{tmp}/sweep-key.yaml"], ["bsae"]),
    ("sweep grid value twice", ["sweep", "{tmp}/sweep-repeat.yaml", "--dry-run"], ["grid.seed", "0", "twice"]),
    ("--grid value twice", ["sweep", "quick", "--grid", "seed=1,1", "--dry-run"], ["--grid seed", "1", "twice"]),
    ("bad scale", ["sweep", "quick", "--scale", "-1"], ["--scale"]),
    ("scale nan", ["sweep", "quick", "--scale", "nan"], ["--scale", "finite", "'nan'"]),
    ("mixers of only commas", ["sweep", "quick", "--mixers", ",", "--dry-run"], ["--mixers", "mixer names"]),
    ("groups of only commas", ["sweep", "quick", "--group", " , ", "--dry-run"], ["--group", "group names"]),
    ("figures of only commas", ["report", "{tmp}/two-runs", "--figures", ","], ["--figures", "figure names"]),
    ("retune and a tuned key", ["sweep", "standard-cpu", "--retune", "--optim.lr", "1e-3", "--dry-run"],
     ["--optim.lr and --retune conflict", "optim.lr"]),
    ("retune and a grid of a tuned key", ["sweep", "standard-cpu", "--retune", "--grid", "optim.lr=1e-3,3e-3",
                                          "--dry-run"],
     ["--grid optim.lr and --retune conflict"]),
    ("retune of a sweep that tunes nothing", ["sweep", "quick", "--retune", "--dry-run"],
     ["--retune", "'quick' tunes nothing"]),
    ("a mixer key some mixer lacks", ["sweep", "quick", "--mixers", "transformer,lru", "--mixer.n_heads", "2",
                                      "--dry-run"], ["mixer.n_heads", "mixer 'lru'"]),
    ("a mixer name over several mixers", ["sweep", "standard-cpu", "--mixer.name", "lru", "--dry-run"],
     ["--mixer.name", "--mixers"]),
    ("a folder as the forecast stop", ["sweep", "quick", "--forecast-stop", "{tmp}/empty"],
     ["--forecast-stop", "a folder"]),
    ("a folder as a forecast to replay", ["forecast", "{tmp}/two-runs", "--replay", "{tmp}/empty"],
     ["--replay", "a folder"]),
    ("a folder as the report file", ["report", "{tmp}/two-runs", "--out", "{tmp}/empty"],
     ["--out", "is a folder", "report.html"]),
    ("pythia model a missing folder", ["analyze", "pythia", "--model", "{tmp}/nowhere/pythia-70m", "--probe",
                                       "repetition", "--out", "{tmp}/pythia-rows"], ["--model", "no such folder"]),
    ("pythia model a file", ["analyze", "pythia", "--model", "{tmp}/a-file", "--probe", "repetition", "--out",
                             "{tmp}/pythia-rows"], ["--model", "a-file is a file"]),
    ("ablation of a group not there", ["analyze", "ablation", "{tmp}/two-arms", "--control", "with-conv",
                                       "--treatment", "with_conv"],
     ["no group 'with_conv'", "its groups are with-conv, without-conv"]),
    ("ablation of a group against itself", ["analyze", "ablation", "{tmp}/two-arms", "--control", "with-conv",
                                            "--treatment", "with-conv"], ["both 'with-conv'"]),
    ("ablation of an empty folder", ["analyze", "ablation", "{tmp}/empty", "--control", "a", "--treatment", "b"],
     ["empty", "holds no result rows"]),
    ("ablation of an arm of two runs a seed", ["analyze", "ablation", "{tmp}/claims-rows", "--control", "bias",
                                               "--treatment", "emergence"],
     ["group bias holds two runs of mixer transformer", "keep one"]),
    # other commands
    ("check-mixer unknown", ["check-mixer", "transfomer"], ["transfomer", "transformer"]),
    ("rank bad rung", ["rank", "{tmp}/empty", "--rung", "linear_map"], ["FAMILY=KEY"]),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad-input")
    files(tmp)
    return tmp


def _timeout(signum, frame):
    raise TimeoutError(f"a bad command ran for more than {SECONDS} s")


def answer(argv, folder, capsys, monkeypatch):
    """``emergence-bench *argv`` run in-process in ``folder`` ({tmp} in argv is it): (exit status, stderr)."""
    monkeypatch.chdir(folder)  # a command that wrongly starts writing does it here, not in the checkout
    argv = [a.replace("{tmp}", str(folder)) for a in argv]
    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(SECONDS)
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's own usage errors
        code = exit.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, capsys.readouterr().err


def one_line(argv, folder, capsys, monkeypatch, words=()):
    """The one ``error:`` line of ``argv``, checked: exit 2, no traceback, no usage block, each of ``words`` in it."""
    code, err = answer(argv, folder, capsys, monkeypatch)
    assert "Traceback" not in err and "usage:" not in err, err
    assert code == EXIT_BAD_INPUT, (code, err)
    lines = [line for line in err.splitlines() if line.startswith("error:") or ": error:" in line]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


@pytest.mark.parametrize("case, argv, words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_one_line_naming_it(case, argv, words, folder, capsys, monkeypatch):
    one_line(argv, folder, capsys, monkeypatch, words)


def test_an_unexpected_error_keeps_its_traceback_and_asks_for_a_report(monkeypatch, capsys):
    import emergence_bench.cli as cli
    from emergence_bench.commands import listing

    def broken() -> list[str]:
        raise KeyError("a bug")

    monkeypatch.setattr(listing, "_sections", broken)  # a bug inside the `list` command
    assert main(["list"]) == cli.EXIT_BUG
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError" in err and "please report" in err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA: a gpu run is legal here")
def test_a_gpu_run_on_a_machine_without_cuda_is_refused_before_it_starts(tmp_path, capsys):
    assert main(["run", "--trainer.accelerator", "gpu", "--out", str(tmp_path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: trainer.accelerator gpu: torch sees no CUDA device") and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())  # no run folder, no failed row


def test_evals_that_never_run_are_warned_of(tmp_path, capsys):
    """Legal but useless: eval_every above max_steps trains without one eval (no eval loss, no emergence)."""
    argv = ["run", "--out", str(tmp_path), "--trainer.eval_every", "50", "--trainer.max_steps", "5",
            "--model.d_model", "16", "--task.batch_size", "8"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "warning: trainer.eval_every 50 > trainer.max_steps 5: the run never evaluates" in err
    main([*argv[:3], "--trainer.eval_every", "5", *argv[5:]])
    assert "warning" not in capsys.readouterr().err


# --- Categories of mistake, generated over the registry of commands -------------------------------------------


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every registered command's parser, and each subcommand's ("analyze pythia"), as the CLI builds them."""
    from emergence_bench.cli import parser

    found = {}

    def walk(p, name):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    found[f"{name} {sub_name}".strip()] = sub
                    walk(sub, f"{name} {sub_name}".strip())

    walk(parser(), "")
    return found


PARSERS = command_parsers()


def options(p: argparse.ArgumentParser):
    """The flags of ``p`` that take a value (not --help, nor a switch)."""
    return [a for a in p._actions if a.option_strings and a.nargs != 0 and not isinstance(a, argparse._HelpAction)]


def a_usage_error(name: str, p: argparse.ArgumentParser) -> list[str]:
    """A command line of the wrong shape for the command ``name``: a required argument left out, else
    a number flag given a word, else a choice flag given none of its choices, else a flag it lacks."""
    if any(a.required for a in p._actions if not a.option_strings or isinstance(a, argparse._SubParsersAction)):
        return name.split()
    for action in options(p):
        if action.type in (int, finite):
            return [*name.split(), action.option_strings[-1], "many"]
    for action in options(p):
        if action.choices:
            return [*name.split(), action.option_strings[-1], "none-of-these"]
    if not COMMANDS[name.split()[0]].takes_extra:
        return [*name.split(), "--no-such-flag"]
    raise AssertionError(f"{name}: no usage error to try (give the command one here)")


@pytest.mark.parametrize("name", PARSERS)
def test_a_command_line_of_the_wrong_shape_is_one_line_pointing_to_help(name, folder, capsys, monkeypatch):
    """argparse's mistakes too: the error and where to look, not ten lines of usage first."""
    line = one_line(a_usage_error(name, PARSERS[name]), folder, capsys, monkeypatch)
    assert line.endswith(f"(see: emergence-bench {name} --help)"), line


def test_every_registered_command_is_among_those_tried():
    assert set(COMMANDS) <= set(PARSERS) and all(name.split()[0] in COMMANDS for name in PARSERS)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_flags_before_the_command_are_named_with_where_they_go(name, folder, capsys, monkeypatch):
    one_line(["--workers", "2", name, "x"], folder, capsys, monkeypatch,
             ["--workers 2 comes before the command " + name, f"emergence-bench {name} --workers 2",
              f"(see: emergence-bench {name} --help)"])


@pytest.mark.parametrize("argv, words", [(["--workers", "2"], ["--workers comes before any command", "sweep"]),
                                         (["sweeep", "quick"], ["no command 'sweeep'", "did you mean 'sweep'"])])
def test_a_command_line_without_a_command_first_names_what_came_instead(argv, words, folder, capsys, monkeypatch):
    one_line(argv, folder, capsys, monkeypatch, words)


EMPTY_VALUES = [(name, a.option_strings[-1]) for name, p in PARSERS.items() for a in options(p)] + [
    (name, None) for name, p in PARSERS.items()
    if any(not a.option_strings and not isinstance(a, argparse._SubParsersAction) for a in p._actions)]


@pytest.mark.parametrize("name, flag", EMPTY_VALUES, ids=[f"{n} {f or 'positional'}" for n, f in EMPTY_VALUES])
def test_an_empty_value_is_refused_not_read_as_the_default(name, flag, folder, capsys, monkeypatch):
    """`--mixers ''`, `--config ''`, a DIR of '': each names nothing; none may fall back to the default
    (every mixer, the built-in config) or to the current folder."""
    argv = [*name.split(), *([flag] if flag else []), ""]
    one_line(argv, folder, capsys, monkeypatch, ["an empty value names nothing", f"argument {flag}" if flag else ""])


NUMBERS = [(name, a.option_strings[-1]) for name, p in PARSERS.items() for a in options(p) if a.type is finite]


def test_no_flag_takes_a_bare_float():
    """float('nan') and float('inf') pass argparse's float: every number flag takes ``finite`` instead."""
    assert NUMBERS and not [(name, a.option_strings) for name, p in PARSERS.items() for a in options(p)
                            if a.type is float]


@pytest.mark.parametrize("name, flag", NUMBERS, ids=[f"{n} {f}" for n, f in NUMBERS])
@pytest.mark.parametrize("value", ["nan", "-inf"])
def test_a_number_flag_that_is_not_finite_is_named(name, flag, value, folder, capsys, monkeypatch):
    one_line([*name.split(), f"{flag}={value}"], folder, capsys, monkeypatch,
             [f"argument {flag}", "finite", repr(value)])


def tree(path):
    """Every file under ``path`` with its size and modification time: what a failed command must leave."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.rglob("*")) if p.is_file()}


NOT_REFERENCES = ["not-gzip.json.gz", "a-config.yaml", "cut-short.json.gz", "a-list.json.gz", "not-json.json.gz",
                  "not-utf8.json.gz", "a-part.json.gz", "empty"]
WITH_REFERENCE = [name for name, p in PARSERS.items() if any("--reference" in a.option_strings for a in options(p))]


@pytest.mark.parametrize("name", WITH_REFERENCE)
@pytest.mark.parametrize("bad", NOT_REFERENCES)
def test_a_reference_that_is_not_one_is_named_with_what_a_reference_is(name, bad, folder, capsys, monkeypatch):
    """Binary garbage, a YAML file, a .gz cut short, gzip of a list, of YAML, of Latin-1, of a part of
    one, a folder: the file named and what a reference is; nothing drawn or written."""
    assert set(WITH_REFERENCE) == {"rank", "report", "claims"}
    before = tree(folder / "two-runs")
    line = one_line([name, "{tmp}/two-runs", "--reference", f"{{tmp}}/{bad}"], folder, capsys, monkeypatch, [bad])
    assert ("is a folder" if bad == "empty" else "not a") in line and "a reference is the gzipped JSON" in line, line
    assert tree(folder / "two-runs") == before


@pytest.fixture(scope="module")
def read_only(folder):
    """A read-only copy of two-runs: a read-only bind mount as root (which permissions do not stop),
    else a folder without write permission."""
    path = folder / "read-only"
    shutil.copytree(folder / "two-runs", path)
    if os.geteuid() != 0:
        folders = [path, *(p for p in path.rglob("*") if p.is_dir())]
        for p in folders:
            p.chmod(0o555)
        yield path
        for p in folders:
            p.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True).returncode == 0 and \
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True).returncode == 0
    if not mounted:
        subprocess.run(["umount", str(path)], capture_output=True)
        pytest.skip("root without a read-only bind mount: no read-only folder to try")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


RUN = "linear_map-transformer-seed0"  # a run folder of two-runs (its id follows)
# What each command writes into a folder it is given, and the advice its line gives.
WRITES = {
    "leaderboard": (["leaderboard", "{ro}"], "writable copy"),
    "rank": (["rank", "{ro}"], "writable copy"),
    "report": (["report", "{ro}"], "--out"),
    "report --out": (["report", "{tmp}/two-runs", "--out", "{ro}/r.html"], "another --out"),
    "claims": (["claims", "{ro}"], "writable copy"),
    "forecast": (["forecast", "{ro}"], "writable copy"),
    "forecast --stopped": (["forecast", "{tmp}/two-runs", "--stopped", "{ro}"], "writable copy"),
    "run": (["run", "--out", "{ro}", "--trainer.max_steps", "1"], "another --out"),
    "sweep": (["sweep", "quick", "--out", "{ro}"], "another --out"),
    "analyze emergence": (["analyze", "emergence", "{ro}/{run}"], "writable copy"),
    "analyze patch": (["analyze", "patch", "{ro}/{run}", "--old", "0", "--new", "5"], "writable copy"),
    "analyze abruptness": (["analyze", "abruptness", "{ro}"], "writable copy"),
    "analyze calibration": (["analyze", "calibration", "{ro}"], "writable copy"),
    "analyze budget": (["analyze", "budget", "{ro}"], "writable copy"),
    "analyze ablation": (["analyze", "ablation", "{ro}", "--control", "a", "--treatment", "b"], "writable copy"),
    "analyze pythia": (["analyze", "pythia", "--model", "{tmp}/empty", "--probe", "repetition", "--out", "{ro}"],
                       "another --out"),
    "lm-family train": (["lm-family", "train", "{ro}"], "another OUT"),
    "lm-family analyze": (["lm-family", "analyze", "{ro}"], "writable copy"),
    "lm-family pilot": (["lm-family", "pilot", "{ro}", "--plan", "{tmp}/empty.yaml"], "another OUT"),
    "speed": (["speed", "--quick", "--out", "{ro}/speed.json"], "another --out"),
}
WRITES_NOTHING = {"list", "check-mixer"}  # (check-mixer trains in memory only)


def test_every_command_is_tried_on_a_read_only_folder_or_writes_none():
    assert {case.split()[0] for case in WRITES} | WRITES_NOTHING == set(COMMANDS)
    leaves = {name for name in PARSERS
              if not any(isinstance(a, argparse._SubParsersAction) for a in PARSERS[name]._actions)}
    tried = {" ".join(argv[:2]) if argv[0] in ("analyze", "lm-family") else argv[0] for argv, _ in WRITES.values()}
    assert {name for name in leaves if name.split()[0] not in WRITES_NOTHING} <= tried


@pytest.mark.parametrize("case", WRITES)
def test_a_read_only_folder_is_named_with_what_to_do_before_anything_is_computed(case, read_only, folder, capsys,
                                                                                 monkeypatch):
    """EROFS (root: a read-only mount) or EACCES: one line naming the folder, and an --out or a writable copy."""
    run = next(p.name for p in read_only.iterdir() if p.name.startswith(RUN))
    argv, advice = WRITES[case]
    argv = [a.replace("{ro}", str(read_only)).replace("{run}", run) for a in argv]
    before = tree(folder / "two-runs")
    line = one_line(argv, folder, capsys, monkeypatch, ["cannot write in ", str(read_only), advice])
    assert ("(EROFS)" if os.geteuid() == 0 else "(EACCES)") in line, line
    assert tree(folder / "two-runs") == before


MAKES_ITS_FOLDER = ("run", "sweep", "lm-family train", "lm-family pilot", "report --out", "speed", "analyze pythia")


@pytest.mark.parametrize("case", MAKES_ITS_FOLDER)
def test_a_folder_where_no_file_can_be_made_is_named_too(case, folder, capsys, monkeypatch):
    """An output folder on a pseudo-filesystem (/proc), which refuses a new file with ENOENT: one line
    naming it, not a traceback."""
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    argv, advice = WRITES[case]
    nowhere = "/proc/emergence-bench-nowhere"
    argv = [a.replace("{ro}", nowhere).replace("{tmp}", str(folder)).replace("{run}", RUN) for a in argv]
    one_line(argv, folder, capsys, monkeypatch, [nowhere])


def test_a_comparison_that_fails_leaves_the_earlier_ranking_as_it_was(folder, tmp_path, capsys, monkeypatch):
    """`rank DIR --against OTHER` with no cell in common: the comparison is made before DIR/rank.* are
    replaced, so they hold the ranking of before (and the next report its reference)."""
    against = [name for name, p in PARSERS.items() if any("--against" in a.option_strings for a in options(p))]
    assert against == ["rank"]
    ranked = tmp_path / "ranked"
    shutil.copytree(folder / "two-runs", ranked)
    other = tmp_path / "other"  # the same runs on another task: no cell (mixer, family, rung) in common
    shutil.copytree(folder / "two-runs", other)
    for path in other.glob("*/result.json"):
        row = json.loads(path.read_text())
        row["config"]["task"]["name"] = "another_task"
        path.write_text(json.dumps(row))
    assert answer(["rank", str(ranked)], folder, capsys, monkeypatch)[0] == 0
    before = tree(ranked)
    assert {p.rsplit("/", 1)[-1] for p in before} >= {"rank.md", "rank.csv", "rank.json"}
    one_line(["rank", str(ranked), "--against", str(other)], folder, capsys, monkeypatch,
             ["share no cell", "another_task"])
    assert tree(ranked) == before  # no rank.* replaced, no reproduction.* written


def test_claims_of_a_folder_without_claims_rows_is_refused_and_writes_nothing(folder, capsys, monkeypatch):
    before = tree(folder / "two-runs")
    one_line(["claims", "{tmp}/two-runs"], folder, capsys, monkeypatch,
             ["no claims rows under", "two-runs", "claims-cpu-v2"])
    assert tree(folder / "two-runs") == before


WITH_WORKERS = {"sweep": ["sweep", "quick", "--dry-run"], "lm-family train": ["lm-family", "train", "{tmp}/lm"],
                "lm-family pilot": ["lm-family", "pilot", "{tmp}/lm", "--plan", "{tmp}/empty.yaml"]}


@pytest.mark.parametrize("name", WITH_WORKERS)
def test_workers_far_beyond_the_cores_are_refused_and_beyond_them_warned_of(name, folder, capsys, monkeypatch):
    from emergence_bench.machine.threads import available_cpus

    with_workers = {n for n, p in PARSERS.items() if any("--workers" in a.option_strings for a in options(p))}
    assert with_workers == set(WITH_WORKERS)
    cores = available_cpus()
    many = WORKERS_PER_CORE * cores + 1
    one_line([*WITH_WORKERS[name], "--workers", str(many)], folder, capsys, monkeypatch,
             [f"--workers {many}", f"{WORKERS_PER_CORE}× the {cores} core(s)", f"--workers {cores}"])
    assert not (folder / "lm").exists()
    if name == "sweep":  # a few more than the cores: legal, with a warning
        code, err = answer([*WITH_WORKERS[name], "--workers", str(cores + 1)], folder, capsys, monkeypatch)
        assert code == 0 and f"warning: --workers {cores + 1} > the {cores} core(s)" in err, err


def test_a_mixer_key_with_mixers_is_set_on_each_of_them_not_dropped(folder, capsys, monkeypatch):
    """`sweep --mixers lru --mixer.d_state 4`: the mixers are a grid axis, whose entries replace the
    base's mixer; the key goes to each of them (and so into every run, and --print-config)."""
    import yaml

    code = main(["sweep", "quick", "--mixers", "lru", "--mixer.d_state", "4", "--print-config"])
    out = capsys.readouterr().out
    runs = list(yaml.safe_load_all(out))
    assert code == 0 and len(runs) == 8
    assert all(run["mixer"]["name"] == "lru" and run["mixer"]["d_state"] == 4 for run in runs)
    code = main(["sweep", "standard-cpu", "--mixers", "transformer", "--mixer.n_heads", "2", "--print-config",
                 "--group", "linear-map"])
    runs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert code == 0 and runs and all(run["mixer"]["n_heads"] == 2 for run in runs)


WITH_STRICT = [name for name, p in PARSERS.items() if any("--strict" in a.option_strings for a in p._actions)]


@pytest.mark.parametrize("name", WITH_STRICT)
def test_a_row_with_a_null_section_is_named_by_every_command_that_reads_rows(name, folder, capsys, monkeypatch):
    """A finished row whose metrics are null is not read as a seed with its numbers missing: named and
    left out (a warning), and with --strict one line naming the file and the key."""
    assert set(WITH_STRICT) == {"leaderboard", "rank", "report"}
    before = tree(folder / "null-metrics")
    one_line([name, "{tmp}/null-metrics", "--strict"], folder, capsys, monkeypatch,
             ["null-metrics", "result.json: metrics is null, not a mapping"])
    assert tree(folder / "null-metrics") == before


def test_the_leaderboard_counts_only_the_rows_it_read(folder, tmp_path, capsys, monkeypatch):
    """Its seeds column and the final loss's mean are over the same runs: the one row it can read."""
    copy = tmp_path / "copy"
    shutil.copytree(folder / "null-metrics", copy)
    code, err = answer(["leaderboard", str(copy)], folder, capsys, monkeypatch)
    assert code == 0 and "metrics is null" in err, err
    (row,) = json.loads((copy / "leaderboard.json").read_text())
    assert row["seeds"] == 1 and row["final_eval_loss"] is not None


RANKING = {"rank": ["rank", "{tmp}/two-budgets"],
           "rank --against": ["rank", "{tmp}/two-runs", "--against", "{tmp}/two-budgets"]}


@pytest.mark.parametrize("case", RANKING)
def test_a_ranking_of_two_settings_in_one_cell_is_refused_and_writes_nothing(case, folder, capsys, monkeypatch):
    """Runs of two budgets in one cell: a success rate over both means neither. Every command that
    ranks a folder names the cell and the budgets, and writes nothing."""
    assert {n for n, p in PARSERS.items() if n == "rank" or any("--against" in a.option_strings for a in options(p))} \
        == {c.split()[0] for c in RANKING}
    before = {name: tree(folder / name) for name in ("two-runs", "two-budgets")}
    one_line(RANKING[case], folder, capsys, monkeypatch,
             ["mixes runs of two settings", "trainer.max_steps=10: 1 run", "trainer.max_steps=20: 1 run"])
    assert {name: tree(folder / name) for name in before} == before


def test_a_pythia_model_that_is_no_folder_writes_no_row(folder, capsys, monkeypatch):
    """A missing folder is not tried as a hub name (whose answer named another problem) nor recorded
    as a failed row: one line, nothing written."""
    one_line(["analyze", "pythia", "--model", "./no-such-folder", "--probe", "repetition", "--out",
              "{tmp}/pythia-rows"], folder, capsys, monkeypatch, ["--model ./no-such-folder: no such folder"])
    assert not (folder / "pythia-rows").exists()


# Each command that writes its outputs beside a folder's rows, run on a copy of the folder named: it
# writes them all at its end, together, so a failure at its last file leaves every earlier one.
OUTPUTS = {
    "leaderboard": ("two-runs", ["leaderboard", "{dir}"]),
    "rank": ("two-runs", ["rank", "{dir}"]),
    "rank --against": ("two-runs", ["rank", "{dir}", "--against", "{tmp}/two-runs"]),
    "report": ("two-runs", ["report", "{dir}", "--figures", "curves,seeds"]),
    "claims": ("claims-rows", ["claims", "{dir}"]),
    "forecast": ("three-runs", ["forecast", "{dir}", "--window", "5", "--permutations", "5", "--save",
                                "all runs={dir}/model.json", "--stopped", "{dir}"]),
    "analyze abruptness": ("two-runs", ["analyze", "abruptness", "{dir}", "--surrogates", "0"]),
    "analyze calibration": ("two-runs", ["analyze", "calibration", "{dir}"]),
    "analyze budget": ("two-runs", ["analyze", "budget", "{dir}"]),
    "analyze ablation": ("two-arms", ["analyze", "ablation", "{dir}", "--control", "with-conv", "--treatment",
                                      "without-conv"]),
}
# The other writers: run and sweep write each run's row as it finishes (a stopped sweep keeps those,
# docs/faults.md), as lm-family train does each seed's; the rest write one file, atomically, once
# everything is computed (analyze emergence, patch, pythia; lm-family analyze's summary; speed).
AS_THEY_GO = {"run", "sweep", "lm-family train", "lm-family pilot"}
ONE_FILE_AT_THE_END = {"analyze emergence", "analyze patch", "analyze pythia", "lm-family analyze", "speed"}


def test_every_command_that_writes_is_tried_at_its_last_file_or_said_why_not():
    assert {case.split(" --")[0] for case in OUTPUTS} | AS_THEY_GO | ONE_FILE_AT_THE_END == \
        {case.split(" --")[0] for case in WRITES}


@pytest.mark.parametrize("case", OUTPUTS)
def test_a_command_whose_last_file_fails_leaves_every_earlier_one_as_it_was(case, folder, tmp_path, capsys,
                                                                            monkeypatch):
    """A full disk at the last file a command writes: its earlier files (here, those of its first call)
    are left whole and unchanged, none replaced by this call's, and no temporary file is left."""
    import errno

    from emergence_bench.results import atomic

    source, argv = OUTPUTS[case]
    work = tmp_path / source
    shutil.copytree(folder / source, work)
    argv = [a.replace("{dir}", str(work)) for a in argv]
    staged, real = [], atomic._staged

    def recording(path, write):
        staged.append(path)
        return real(path, write)

    monkeypatch.setattr(atomic, "_staged", recording)
    code, err = answer(argv, folder, capsys, monkeypatch)
    assert code == 0 and staged, err
    before, last = tree(work), staged[-1]

    def full_at_the_last(path, write):
        if path == last:
            raise atomic.unwritable(path, OSError(errno.ENOSPC, "No space left on device"))
        return real(path, write)

    monkeypatch.setattr(atomic, "_staged", full_at_the_last)
    one_line(argv, folder, capsys, monkeypatch, [f"cannot write {last}", "(ENOSPC)"])
    assert tree(work) == before


def test_a_forecast_whose_save_names_no_fleet_writes_nothing(folder, tmp_path, capsys, monkeypatch):
    """`forecast --save FLEET=PATH` with a fleet it does not have: refused before its tables are
    computed or its forecast.md and .json written."""
    work = tmp_path / "three-runs"
    shutil.copytree(folder / "three-runs", work)
    before = tree(work)
    one_line(["forecast", str(work), "--window", "5", "--permutations", "5", "--save", f"nosuch={work}/m.json"],
             folder, capsys, monkeypatch, ["--save takes FLEET=PATH with FLEET one of: all runs", "nosuch"])
    assert tree(work) == before


# Every argument that names a folder to read, and a command line around it ({missing}: a folder that does
# not exist). `lm-family train OUT` and the --out flags name folders to make, and are not here.
READ_FOLDERS = {
    ("leaderboard", None): ["leaderboard", "{missing}"],
    ("rank", None): ["rank", "{missing}"],
    ("rank", "--against"): ["rank", "{tmp}/two-runs", "--against", "{missing}"],
    ("report", None): ["report", "{missing}"],
    ("claims", None): ["claims", "{missing}"],
    ("forecast", None): ["forecast", "{missing}"],
    ("forecast", "--stopped"): ["forecast", "{tmp}/three-runs", "--stopped", "{missing}"],
    ("analyze emergence", None): ["analyze", "emergence", "{missing}"],
    ("analyze patch", None): ["analyze", "patch", "{missing}", "--old", "0", "--new", "5"],
    ("analyze abruptness", None): ["analyze", "abruptness", "{missing}"],
    ("analyze calibration", None): ["analyze", "calibration", "{missing}"],
    ("analyze budget", None): ["analyze", "budget", "{missing}"],
    ("analyze ablation", None): ["analyze", "ablation", "{missing}", "--control", "a", "--treatment", "b"],
    ("analyze pythia", "--model"): ["analyze", "pythia", "--model", "{missing}", "--probe", "repetition", "--out",
                                    "{tmp}/pythia-rows"],
    ("lm-family analyze", None): ["lm-family", "analyze", "{missing}"],
}


def test_every_folder_a_command_reads_is_tried_missing():
    found = {(name, a.option_strings[-1] if a.option_strings else None) for name, p in PARSERS.items()
             for a in p._actions if a.metavar in ("DIR", "RUN_DIR", "OTHER", "DIR2")}
    assert found | {("analyze pythia", "--model"), ("lm-family analyze", None)} == set(READ_FOLDERS)


@pytest.mark.parametrize("case", READ_FOLDERS, ids=[" ".join(filter(None, c)) for c in READ_FOLDERS])
def test_a_folder_that_does_not_exist_is_named_and_nothing_is_made(case, folder, capsys, monkeypatch):
    """One line naming the folder (never a hub's answer, a traceback, or a row recording the failure),
    and nothing made: neither the folder nor an output."""
    missing = folder / "no-such" / "folder"
    before = tree(folder)
    argv = [a.replace("{missing}", str(missing)) for a in READ_FOLDERS[case]]
    one_line(argv, folder, capsys, monkeypatch, [str(missing)])
    assert not (folder / "no-such").exists() and tree(folder) == before
