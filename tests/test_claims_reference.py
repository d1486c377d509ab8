"""The claims' shipped reference (emergence_bench.claims.reference) on constructed rows of the preset's
own runs: built and read back, judging as the rows themselves; filling the groups (and mixers) a
folder lacks and never those it has; a plugin judged against the reference's Transformer rows; the
replication never filled; refused in one line where it does not apply or does not exist; and
docs/results.md's table generated from it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from test_claims import row

from emergence_bench.claims import claims, reference
from emergence_bench.claims.judge import judge, judge_folder
from emergence_bench.claims.replication import RUNS, STAGE, seeds
from emergence_bench.cli import main
from emergence_bench.config import ConfigError, resolve
from emergence_bench.execution.sweep_spec import load_sweep
from emergence_bench.reporting import shipped_scorecard
from emergence_bench.results import packed
from emergence_bench.results.store import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("emergence", "bias", "recurrent")  # enough to judge claims 1, 2, 5 and 7 (trails-transformer)


def preset_rows(groups: tuple[str, ...] = GROUPS) -> dict[str, list[dict[str, Any]]]:
    """A row for each of claims-cpu-v2's runs of ``groups``, with its run id and resolved config:
    the Transformer emerges near step 500 (its plateau ending sooner under the true bias), the
    recurrent mixers never."""
    found: dict[str, list[dict[str, Any]]] = {}
    for group, raw in load_sweep(reference.PRESET).raw_runs():
        if group not in groups:
            continue
        config = resolve(raw)
        as_dict = config.to_dict()
        seed, instance = as_dict["seed"], as_dict["task"]["task_seed"]
        bias = (as_dict["callbacks"].get("attention_bias") or {}).get("pattern")
        transformer = as_dict["mixer"]["name"] == "transformer"
        plateau = 100 + 3 * seed if bias == "predict" else 300 + 7 * seed + instance
        made = row(seed, instance, emergence=400 + 20 * seed + 5 * instance if transformer and not bias else None,
                   plateau=plateau if transformer else None, attention=transformer)
        found.setdefault(group, []).append({**made, "run_id": config.run_id(), "config": as_dict})
    return found


def write_folder(folder: Path, groups: dict[str, list[dict[str, Any]]]) -> Path:
    for group, found in groups.items():
        for r in found:
            (folder / group / r["run_id"]).mkdir(parents=True)
            (folder / group / r["run_id"] / "result.json").write_text(
                json.dumps({"schema_version": SCHEMA_VERSION, "versions": {"torch": "2.5.0"}, **r}))
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, dict[str, Any]]:
    """A folder of the preset's runs (and an exploration run the reference leaves out), and its
    reference written to a file."""
    folder = write_folder(tmp_path_factory.mktemp("claims"), preset_rows())
    exploration = {**row(100, 100), "run_id": "explore"}
    write_folder(folder, {"emergence": [exploration]})
    out = folder.parent / "claims-ref.json.gz"
    packed.write(reference.build(folder), out)
    return folder, out, reference.load(str(out))


def shown(card: list) -> dict[str, tuple]:
    return {line[0]: line[1:] for line in reference.printed(card)}


def test_a_reference_holds_the_presets_runs_and_judges_as_they_do(built):
    folder, out, ref = built
    assert {g: len(rows) for g, rows in ref["rows"].items()} == {"bias": 48, "emergence": 16, "recurrent": 48}
    assert ref["runs"] == "112 of the preset's 544" and ref["stage"] == "confirmation"
    assert "explore" not in {r["run_id"] for rows in ref["rows"].values() for r in rows}
    (folder.parent / "nothing").mkdir(exist_ok=True)
    on_rows = judge_folder(folder)
    on_reference = judge_folder(folder.parent / "nothing", shipped=reference.rows(ref), stage=ref["stage"])
    assert shown(on_rows) == shown(on_reference)
    verdicts = {line.claim.id + (f"[{line.label}]" if line.label else ""): line.verdict for line in on_reference}
    assert verdicts["bias-removes-plateau[vs none]"] == "agrees" and verdicts["trails-transformer[mamba]"] == "agrees"
    assert verdicts["mixer-ca"] == "not run"
    # what a full preset would add: a row's compacted size × the preset's runs (printed by -s)
    size = out.stat().st_size / 112
    print(f"\n{size:.0f} bytes a constructed row, compacted: ≈ {size * 544 / 1e6:.2f} MB for 544 runs")


def test_a_folder_s_own_group_wins_and_the_reference_fills_the_rest(built, tmp_path):
    _, out, ref = built
    late = [{**r, "emergence": {"step": 1300}} for r in preset_rows(("emergence",))["emergence"]]
    mine = write_folder(tmp_path / "mine", {"emergence": late[:9]})  # 9 of 16: partly, still its own
    card = judge_folder(mine, shipped=reference.rows(ref), stage=ref["stage"])
    seeds_differ = next(line for line in card if line.claim.id == "seeds-differ")
    assert seeds_differ.outcome.n == "9"  # the folder's 9 runs, not topped up from the reference
    bias = {line.label: line for line in card if line.claim.id == "bias-removes-plateau"}
    assert bias["vs none"].outcome.n == "16 vs 9"  # the reference's bias arms, against the folder's own emergence
    assert main(["claims", str(mine), "--reference", str(out)]) == 0
    note = (mine / "claims.md").read_text().splitlines()[-1]
    assert note.startswith("from the reference claims-cpu-v2 (confirmation") and note.endswith(
        ": bias (transformer), recurrent (gated_deltanet, mamba, rwkv7)")


def test_an_empty_folder_prints_the_references_scorecard(built, tmp_path, capsys):
    _, out, ref = built
    (tmp_path / "empty").mkdir()
    assert main(["claims", str(tmp_path / "empty"), "--reference", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(shipped_scorecard.generated(ref))
    assert "not run.\n" in printed and printed.endswith(
        ": bias (transformer), emergence (transformer), recurrent (gated_deltanet, mamba, rwkv7)\n")


def test_a_plugin_is_judged_against_the_references_transformer_rows(built, tmp_path):
    _, out, ref = built
    plugin = {group: [{**r, "run_id": r["run_id"] + "-mine", "emergence": {"step": None},
                       "config": {**r["config"], "mixer": {"name": "my_mixer"}}}
                      for r in rows if r["config"]["mixer"]["name"] == "transformer"]
              for group, rows in preset_rows(("emergence", "recurrent")).items()}
    plugin["recurrent"] = [{**r, "config": {**r["config"], "mixer": {"name": "my_mixer"}}}
                           for r in plugin["emergence"]]  # the plugin's 16 recurrent runs
    mine = write_folder(tmp_path / "mine", plugin)
    card = judge_folder(mine, shipped=reference.rows(ref), stage=ref["stage"])
    trails = {line.label: line for line in card if line.claim.id == "trails-transformer"}
    assert set(trails) == {"my_mixer", "mamba", "gated_deltanet", "rwkv7"}
    assert trails["my_mixer"].verdict == "agrees" and trails["my_mixer"].outcome.n == "16 vs 16"
    seeds_differ = {line.label for line in card if line.claim.id == "seeds-differ"}
    assert seeds_differ == {"my_mixer", "transformer"}  # each mixer judged alone, the Transformer's from the reference
    assert main(["claims", str(mine), "--reference", str(out)]) == 0
    assert (mine / "claims.md").read_text().splitlines()[-1].endswith(
        ": bias (transformer), emergence (transformer), recurrent (gated_deltanet, mamba, rwkv7)")


def test_the_replication_is_never_filled_from_the_first_stages_reference(built, tmp_path):
    _, _, ref = built
    again = [row(s, t, emergence=300 + 40 * (s % 20)) for s in seeds(RUNS["seeds-differ"]) for t in (0, 1)]
    mine = write_folder(tmp_path / "mine", {"emergence": again})
    card = judge_folder(mine, shipped=reference.rows(ref), stage=ref["stage"])
    by_id = {line.claim.id: line for line in card if not line.label}
    assert by_id["seeds-differ-replication"].outcome.n == "88"  # the folder's rows only
    assert by_id["curricula-replication"].verdict == "not run"  # its curricula group: not the reference's
    first = judge_folder(tmp_path / "mine", shipped=reference.rows(ref), stage=ref["stage"])
    assert {line.claim.stage for line in first} == {"confirmation", STAGE}
    # the first stage read the reference's emergence rows: the folder's seeds are not its runs
    assert shown([line for line in card if line.claim.stage == "confirmation"]) == \
        shown([line for line in judge({g: list(r) for g, r in reference.rows(ref).items()}, claims())
               if line.claim.stage == "confirmation"])


def one_line(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, err
    return lines[0]


def test_a_reference_built_on_another_design_is_refused(built, tmp_path, capsys):
    _, _, ref = built
    other = copy.deepcopy(ref)
    other["design"]["runs"]["bias"] = other["design"]["runs"]["bias"][1:]
    other["sha256"] = reference.digest(other["design"])
    packed.write(other, tmp_path / "other.json.gz")
    (tmp_path / "mine").mkdir()
    line = one_line(["claims", str(tmp_path / "mine"), "--reference", str(tmp_path / "other.json.gz")], capsys)
    assert "does not apply: it was built on another design" in line and "group bias: 1 run id(s) new" in line
    assert "--save-reference" in line and not list((tmp_path / "mine").iterdir())
    ranking = ROOT / "benchmark" / "presets" / "reference" / "standard-cpu.json.gz"
    assert "not a claims reference" in one_line(["claims", str(tmp_path / "mine"), "--reference", str(ranking)],
                                                 capsys)


def test_without_a_shipped_reference_builtin_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(reference, "SHIPPED", tmp_path / "claims-cpu-v2.json.gz")
    monkeypatch.setattr(reference, "NONE_SHIPPED", reference.NONE_SHIPPED)  # (its words name the real path)
    (tmp_path / "empty").mkdir()
    line = one_line(["claims", str(tmp_path / "empty"), "--reference", "builtin"], capsys)
    assert "no claims reference ships with this version" in line and "--save-reference" in line
    with pytest.raises(ConfigError, match="no such file"):
        reference.load(str(tmp_path / "nope.json.gz"))


def test_save_reference_writes_the_file_and_says_its_size(built, tmp_path, capsys):
    folder, _, _ = built
    assert main(["claims", str(folder), "--save-reference", str(tmp_path / "ref.json.gz")]) == 0
    assert "112 of the preset's 544 runs in 3 groups" in capsys.readouterr().out
    assert reference.load(str(tmp_path / "ref.json.gz"))["rows"].keys() == {"bias", "emergence", "recurrent"}
    (tmp_path / "none").mkdir()
    assert "no run of claims-cpu-v2" in one_line(["claims", str(tmp_path / "none"), "--save-reference",
                                                  str(tmp_path / "x.json.gz")], capsys)


def test_the_docs_table_is_found_replaced_and_compared(built):
    _, _, ref = built
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    table = shipped_scorecard.generated(ref)
    assert shipped_scorecard.table_in(page).startswith("| claim | effect [95%] |")
    rewritten = shipped_scorecard.with_table(page, table)
    assert shipped_scorecard.table_in(rewritten) == table and rewritten != page
    assert rewritten.replace(table, "") == page.replace(shipped_scorecard.table_in(page), "")  # nothing else moved
    with pytest.raises(ValueError, match="no table under"):
        shipped_scorecard.table_in("# results\n")


@pytest.mark.skipif(not reference.SHIPPED.is_file(),
                    reason=f"no claims reference ships yet ({reference.SHIPPED.name}): docs/results.md's table "
                           "is held equal to it once a claims-cpu-v2 sweep's rows are saved with --save-reference")
def test_the_results_page_shows_the_shipped_scorecard():
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert shipped_scorecard.table_in(page) == shipped_scorecard.generated(reference.load(reference.BUILTIN)), \
        "run `python -m emergence_bench.reporting.shipped_scorecard docs/results.md`"


def test_judging_with_a_reference_imports_neither_torch_nor_lightning(built, tmp_path):
    from test_cli_imports import answer

    folder, out, _ = built
    (tmp_path / "empty").mkdir()
    for argv in (["claims", str(tmp_path / "empty"), "--reference", str(out)],
                 ["claims", str(folder), "--save-reference", str(tmp_path / "ref.json.gz")]):
        assert answer(argv, tmp_path) == {"status": 0, "torch": False, "lightning": False}, argv
