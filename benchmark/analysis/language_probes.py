"""Language probes for pretrained models (docs/science.md, "Language probes"): templated, deterministic prompt
sets whose answer is one next token. "Solved" = the greedy next token is the answer.

    repetition             string repetition: "0 7 3 1 2 0 2 3 0 7 3 1 2 0 2" -> " 3"
    in_context_repetition  a word list, a distractor sentence, the list again: ... -> its next word
    pattern_completion     arithmetic progressions: "3 6 9 12 15 18" -> " 21"
    ioi                    indirect object identification: "When Mary and John went to the store,
                           John gave a drink to" -> " Mary"

``probe_set(name, n, seed, lexicon=...)`` gives ``n`` distinct prompts drawn from ``random.Random``
seeded by (name, seed), the same on every machine; ``single=True`` gives the paper's single prompt
instead. A lexicon is the probe set's words: ``modern`` (Pythia's: digits, modern names) or
``shakespeare`` (the language family's corpus, which has no digits: words and names from the plays).
Answers carry their leading space (the way BPE tokenizers such as GPT-NeoX's spell a next word).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Prompt:
    text: str  # everything before the answer, no trailing space
    answer: str  # the correct continuation, with its leading space: " 3"


@dataclass(frozen=True)
class Lexicon:
    """The words a probe set is built from, so each probe can speak its corpus's language.

    ``symbols`` are the repetition strings' alphabet and ``numbers[i]`` spells i (pattern completion);
    ``words`` are the in-context lists; the rest fill the IOI templates."""

    symbols: tuple[str, ...]
    numbers: tuple[str, ...]
    words: tuple[str, ...]
    distractors: tuple[str, ...]
    names: tuple[str, ...]
    places: tuple[str, ...]
    objects: tuple[str, ...]
    ioi_templates: tuple[str, ...]
    single: dict[str, Prompt]  # the paper's single-prompt mode


MODERN = Lexicon(  # Pythia's: digits and modern names, one token each in GPT-NeoX's vocabulary
    symbols=tuple(str(d) for d in range(10)),
    numbers=tuple(str(n) for n in range(200)),
    words=("apple", "river", "stone", "cloud", "table", "horse", "glass", "paper", "chair", "music", "bread",
           "water", "light", "money", "house", "green", "train", "plant", "night", "dream", "smile", "ocean",
           "field", "sugar"),
    distractors=("The sun was warm and the road was long.", "Nobody said a word for a while.",
                 "It rained all morning in the city.", "She closed the door and sat down."),
    names=("Mary", "John", "Alice", "Bob", "Tom", "James", "Sarah", "Michael", "Anna", "David", "Emma", "Paul",
           "Kate", "Mark", "Lisa", "Peter"),
    places=("store", "park", "school", "office", "garden", "station"),
    objects=("drink", "book", "ball", "letter", "gift", "key"),
    ioi_templates=(
        "When {a} and {b} went to the {place}, {b} gave a {object} to",
        "After {a} and {b} arrived at the {place}, {b} handed the {object} to",
        "While {a} and {b} were working at the {place}, {b} passed a {object} to",
        "Then {a} and {b} had a long argument at the {place}. Afterwards {b} gave a {object} to",
    ),
    single={  # the paper's example for string repetition; canonical ones for the rest
        "repetition": Prompt("0 7 3 1 2 0 2 3 0 7 3 1 2 0 2", " 3"),
        "in_context_repetition": Prompt("apple river stone cloud table horse. The sun was warm and the road was "
                                        "long. apple river stone cloud table", " horse"),
        "pattern_completion": Prompt("2 4 6 8 10 12", " 14"),
        "ioi": Prompt("When Mary and John went to the store, John gave a drink to", " Mary"),
    },
)

_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                 "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
                 "twenty")
SHAKESPEARE = Lexicon(  # lm-family's corpus: no digits; words and names one token each in its 2,048-token BPE
    symbols=("man", "day", "life", "time", "earth", "sea", "fire", "son", "wife", "war"),
    numbers=_NUMBER_WORDS,  # (one, two, three and ten are one token; the answer's first token is scored)
    words=("king", "queen", "lord", "love", "heart", "sword", "crown", "death", "blood", "gold", "night", "horse",
           "eyes", "friend", "fool", "honour", "heaven", "father", "mother", "brother", "soul", "grace", "hand",
           "world"),
    distractors=("I pray you, sir, be gone.", "What say you to this, my lord?", "Come, let us go in.",
                 "The night is cold and the wind is high."),
    names=("Antony", "Caesar", "Edward", "Henry", "John", "Warwick", "York"),
    places=("court", "field", "house", "sea", "prison", "land"),
    objects=("letter", "sword", "crown", "horse", "kiss", "present"),
    ioi_templates=(
        "When {a} and {b} went to the {place}, {b} gave a {object} to",
        "After {a} and {b} came to the {place}, {b} gave the {object} to",
        "While {a} and {b} walked in the {place}, {b} gave a {object} to",
        "Then {a} and {b} did quarrel at the {place}. Anon {b} gave a {object} to",
    ),
    single={
        "repetition": Prompt("man sea life man day sea day life man sea life man day sea day", " life"),
        "in_context_repetition": Prompt("king queen lord love heart sword. I pray you, sir, be gone. "
                                        "king queen lord love heart", " sword"),
        "pattern_completion": Prompt("two four six eight ten twelve", " fourteen"),
        "ioi": Prompt("When Henry and Edward went to the court, Edward gave a letter to", " Henry"),
    },
)
LEXICONS = {"modern": MODERN, "shakespeare": SHAKESPEARE}


def string_repetition(rng: random.Random, lexicon: Lexicon, length: int = 8) -> Prompt:
    """A random string of symbols, then the same string without its last one: the answer is that one."""
    symbols = [rng.choice(lexicon.symbols) for _ in range(length)]
    return Prompt(" ".join(symbols + symbols[:-1]), " " + symbols[-1])


def in_context_repetition(rng: random.Random, lexicon: Lexicon, length: int = 6) -> Prompt:
    """A list of distinct words, an unrelated sentence, then the list again up to its last word."""
    words = rng.sample(lexicon.words, length)
    return Prompt(f"{' '.join(words)}. {rng.choice(lexicon.distractors)} {' '.join(words[:-1])}", " " + words[-1])


def pattern_completion(rng: random.Random, lexicon: Lexicon, length: int = 6) -> Prompt:
    """An arithmetic progression (numbers as the lexicon spells them): the answer is its next term. With
    digits, start 1–20 and step 2–9; with the number words up to twenty, start 1–8 and step 1–3
    (at least four terms shown)."""
    top = len(lexicon.numbers) - 1
    start, step = (rng.randint(1, 20), rng.randint(2, 9)) if top >= 200 - 1 else (rng.randint(1, 8), rng.randint(1, 3))
    length = min(length, (top - start) // step)  # every term must be spelt
    terms = [lexicon.numbers[start + i * step] for i in range(length + 1)]
    return Prompt(" ".join(terms[:-1]), f" {terms[-1]}")


def ioi(rng: random.Random, lexicon: Lexicon) -> Prompt:
    """Indirect object identification: the name that is not repeated is the answer."""
    a, b = rng.sample(lexicon.names, 2)
    template = rng.choice(lexicon.ioi_templates)
    return Prompt(template.format(a=a, b=b, place=rng.choice(lexicon.places), object=rng.choice(lexicon.objects)),
                  " " + a)


PROBES: dict[str, Callable[[random.Random, Lexicon], Prompt]] = {
    "repetition": string_repetition,
    "in_context_repetition": in_context_repetition,
    "pattern_completion": pattern_completion,
    "ioi": ioi,
}


def probe_set(name: str, n: int = 64, seed: int = 0, single: bool = False,
              lexicon: str = "modern") -> list[Prompt]:
    """``n`` distinct prompts of probe ``name`` in ``lexicon``'s words (deterministic in ``seed``), or
    its single prompt."""
    if name not in PROBES:
        raise ValueError(f"unknown probe {name!r}; known probes: {', '.join(sorted(PROBES))}")
    if lexicon not in LEXICONS:
        raise ValueError(f"unknown lexicon {lexicon!r}; known lexicons: {', '.join(sorted(LEXICONS))}")
    words = LEXICONS[lexicon]
    if single:
        return [words.single[name]]
    if n < 1:
        raise ValueError(f"the number of prompts must be ≥ 1, got {n}")
    rng = random.Random(f"{name}/{seed}")  # str seeds hash with SHA-512: the same on every run
    prompts: dict[Prompt, None] = {}
    for _ in range(100 * n):  # a few templates have fewer than n distinct prompts
        prompts.setdefault(PROBES[name](rng, words))
        if len(prompts) == n:
            break
    return list(prompts)
