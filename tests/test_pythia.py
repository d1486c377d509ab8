"""Language probes and `analyze pythia` end to end on a tiny local GPT-NeoX (nothing is downloaded)."""

import argparse
import json
import math
import sys

import pytest
import torch

pytest.importorskip("transformers")
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from emergence_bench.analysis import pythia  # noqa: E402
from emergence_bench.analysis.language_probes import MODERN, PROBES, probe_set  # noqa: E402
from emergence_bench.cli import main as cli_main  # noqa: E402
from emergence_bench.commands import analyze  # noqa: E402
from emergence_bench.reporting import leaderboard  # noqa: E402

VOCAB = {"[UNK]": 0, **{str(d): d + 1 for d in range(10)}}
PERIOD = 8  # the repetition probe's string length


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Digits as words: "0 7 3" -> [1, 8, 4]."""
    tokenizer = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]")


def train(model, steps: int, generator: torch.Generator) -> None:
    """Teach the model to repeat a random digit string (it learns in ~100 steps, ~1 s)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        s = torch.randint(1, 11, (32, PERIOD), generator=generator)
        x = torch.cat([s, s], dim=1)
        logits = model(input_ids=x[:, :-1]).logits[:, PERIOD - 1:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, len(VOCAB)), x[:, PERIOD:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


@pytest.fixture(scope="module")
def tiny_pythia(tmp_path_factory):
    """MODEL/step0 (init), step1000 (3 updates: unsolved), step2000 and step3000 (trained: solved)."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny-pythia")
    tiny_tokenizer().save_pretrained(root)
    torch.manual_seed(0)
    config = GPTNeoXConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=32)
    model = GPTNeoXForCausalLM(config)
    generator = torch.Generator().manual_seed(0)
    for step, updates in ((0, 0), (1000, 3), (2000, 150), (3000, 50)):
        train(model, updates, generator)
        model.save_pretrained(root / f"step{step}")
    return root


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    analyze.add_parser(parser.add_subparsers(dest="command", required=True))
    args, extra = parser.parse_known_args(["analyze", *argv])
    return analyze.main(args, extra)


# --- probe sets ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_sets_are_deterministic_distinct_and_answerable(name):
    prompts = probe_set(name, n=32, seed=0)
    assert prompts == probe_set(name, n=32, seed=0) and prompts != probe_set(name, n=32, seed=1)
    assert len(set(prompts)) == 32
    for p in prompts:
        assert p.answer.startswith(" ") and len(p.answer.split()) == 1 and not p.text.endswith(" ")
    assert probe_set(name, single=True) == [MODERN.single[name]]


def test_probe_answers_follow_their_rule():
    for p in probe_set("repetition", 16):
        digits = p.text.split()
        assert len(digits) == 2 * PERIOD - 1 and digits[PERIOD:] == digits[: PERIOD - 1]
        assert p.answer == " " + digits[PERIOD - 1]
    for p in probe_set("pattern_completion", 16):
        terms = [int(t) for t in p.text.split()] + [int(p.answer)]
        assert len({b - a for a, b in zip(terms, terms[1:])}) == 1
    for p in probe_set("ioi", 16):
        names = [w.strip(",.") for w in p.text.split() if w.strip(",.").istitle() and w.strip(",.") not in
                 ("When", "After", "While", "Then", "Afterwards")]
        repeated = {n for n in names if names.count(n) == 2}
        assert len(repeated) == 1 and p.answer.strip() in names and p.answer.strip() not in repeated
    for p in probe_set("in_context_repetition", 16):
        words = p.text.split()
        assert words.count(p.answer.strip() + ".") == 1  # shown once, at the end of the list
    single = MODERN.single["repetition"]
    assert single.text == "0 7 3 1 2 0 2 3 0 7 3 1 2 0 2" and single.answer == " 3"
    with pytest.raises(ValueError, match="known probes: in_context_repetition, ioi"):
        probe_set("nonsense")


def test_revision_names_and_seeds():
    assert len(pythia.PYTHIA_STEPS) == 154 and pythia.PYTHIA_STEPS[:3] == [0, 1, 2]
    assert pythia.PYTHIA_STEPS[-1] == 143000
    assert pythia.default_revisions("EleutherAI/pythia-70m")[-1] == "step143000"
    assert pythia.model_and_seed("EleutherAI/pythia-160m-seed3") == ("EleutherAI/pythia-160m", 3)
    assert pythia.model_and_seed("EleutherAI/pythia-70m") == ("EleutherAI/pythia-70m", 0)
    assert pythia.revision_step("step2000") == 2000
    with pytest.raises(ValueError, match="not named stepN"):
        pythia.revision_step("main")


# --- the attention hook -------------------------------------------------------------------------
def test_eager_hook_records_and_replaces_the_models_attention(tiny_pythia):
    lm = pythia.load_model(str(tiny_pythia), "step2000", torch.device("cpu"))
    assert lm.config._attn_implementation == "eager"
    ids = torch.tensor([[1, 8, 4, 2, 3, 1, 3, 4, 1, 8, 4]])
    module = sys.modules[type(lm.gpt_neox.layers[0].attention).__module__]
    library = module.eager_attention_forward
    with torch.no_grad():
        reference = lm(input_ids=ids, output_attentions=True)
        captured = {}
        with pythia.eager_attention(lm, capture=captured):
            hooked = lm(input_ids=ids).logits
        assert torch.equal(hooked, reference.logits)
        assert torch.equal(captured[0], reference.attentions[0])  # the eager probabilities themselves
        own = {0: lambda probs: captured[0]}
        with pythia.eager_attention(lm, patch=own):
            assert torch.equal(lm(input_ids=ids).logits, reference.logits)
        L = ids.shape[1]
        uniform = torch.ones(L, L).tril() / torch.arange(1, L + 1)[:, None]
        with pythia.eager_attention(lm, patch={0: lambda probs: uniform.expand_as(probs)}):
            assert not torch.allclose(lm(input_ids=ids).logits, reference.logits)
    assert module.eager_attention_forward is library  # restored: later forwards run the library's own
    with torch.no_grad():
        assert torch.equal(lm(input_ids=ids).logits, reference.logits)


def test_patching_a_language_model_with_its_own_maps_gives_zero_delta_p(tiny_pythia):
    lm = pythia.load_model(str(tiny_pythia), "step1000", torch.device("cpu"))
    probe = pythia.EncodedProbe(tiny_tokenizer(), probe_set("repetition", 8), torch.device("cpu"))
    report = pythia.patch_language_models(lm, lm, probe, top_k=2)
    assert len(report["heads"]) == 4 and all(row["delta_p"] == 0.0 for row in report["heads"])


# --- the command ----------------------------------------------------------------------------------
def test_pythia_command_end_to_end_on_local_revisions(tiny_pythia, tmp_path, capsys):
    out = tmp_path / "pythia"
    assert cli("pythia", "--model", str(tiny_pythia), "--probe", "repetition", "--prompts", "16",
               "--out", str(out), "--device", "cpu") == 0
    [path] = list(out.rglob("result.json"))
    row = json.loads(path.read_text())
    assert row["status"] == "ok" and row["seed"] == 0
    assert row["config"]["task"] == {"name": "language_probe", "probe": "repetition", "prompts": 16, "single": False,
                                     "probe_seed": 0, "threshold": 0.5}
    assert row["config"]["mixer"]["name"] == "pythia"
    assert row["revisions"] == ["step0", "step1000", "step2000", "step3000"]
    e = row["emergence"]
    assert e["step"] == 2000 and e["bracket"] == [1000, 2000] and e["revision"] == "step2000"
    assert e["evaluations"] <= math.ceil(math.log2(4 + 1))
    assert dict(e["history"])[2000] >= 0.5 > dict(e["history"])[1000]
    p = row["patching"]
    assert (p["old"], p["new"]) == (1000, 2000) and p["p_new"] > p["p_old"]
    assert len(p["top_heads"]) == 4 and p["top_heads"][0]["delta_p"] == max(h["delta_p"] for h in p["heads"])
    assert [t["k"] for t in p["top_k"]] == [1, 2, 3, 4] and p["gap_recovered_by"] == 4
    assert p["gap_recovered"] == p["top_k"][-1]["fraction_recovered"]
    assert "emergence between step 1000 and step 2000" in capsys.readouterr().out

    # The leaderboard reads the row like a run's: one group, emerged, median emergence step 2000.
    table, markdown = leaderboard.write(out)
    assert len(table) == 1 and table.iloc[0]["emerged"] == 1 and table.iloc[0]["median_emergence_step"] == 2000
    assert "language_probe" in markdown and "pythia" in markdown
    assert cli_main(["leaderboard", str(out)]) == 0


def test_pythia_command_single_prompt_given_revisions_and_bad_input(tiny_pythia, tmp_path):
    out = tmp_path / "single"
    assert cli("pythia", "--model", str(tiny_pythia), "--probe", "repetition", "--single",
               "--revisions", "step0", "step3000", "--out", str(out), "--device", "cpu") == 0
    row = json.loads(next(out.rglob("result.json")).read_text())
    assert row["config"]["task"]["prompts"] == 1 and row["emergence"]["bracket"] == [0, 3000]
    with pytest.raises(ValueError, match="no checkpoint folder"):
        cli("pythia", "--model", str(tiny_pythia), "--probe", "repetition", "--revisions", "step5000",
            "--out", str(out))
    with pytest.raises(SystemExit):  # argparse rejects an unknown probe
        cli("pythia", "--model", str(tiny_pythia), "--probe", "nonsense")
