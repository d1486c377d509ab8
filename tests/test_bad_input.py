"""Bad input, as a new user types it: every mistake ends within seconds, non-zero, with one line that
names the problem, and never a traceback. One table of command lines and files; each row is a case."""

import json
import signal

import pytest

from emergence_bench.cli import EXIT_BAD_INPUT, main

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
    two_runs(tmp_path / "two-runs")


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


@pytest.mark.parametrize("case, argv, words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_one_line_naming_it(case, argv, words, folder, capsys, monkeypatch):
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
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert code == EXIT_BAD_INPUT, (code, err)
    lines = [line for line in err.splitlines() if line.startswith("error:") or ": error:" in line]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], (word, lines[0])


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
