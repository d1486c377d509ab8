"""Language probes for pretrained models (PAPER.md, "Language probes"): templated, deterministic prompt
sets whose answer is one next token. "Solved" = the greedy next token is the answer.

    repetition             string repetition: "0 7 3 1 2 0 2 3 0 7 3 1 2 0 2" -> " 3"
    in_context_repetition  a word list, a distractor sentence, the list again: ... -> its next word
    pattern_completion     arithmetic progressions: "3 6 9 12 15 18" -> " 21"
    ioi                    indirect object identification: "When Mary and John went to the store,
                           John gave a drink to" -> " Mary"

``probe_set(name, n, seed)`` gives ``n`` distinct prompts drawn from ``random.Random`` seeded by
(name, seed), the same on every machine; ``single=True`` gives the paper's single prompt instead.
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


DIGITS = [str(d) for d in range(10)]
# Short, common words and names: one token each in GPT-NeoX's vocabulary (with a leading space).
WORDS = ["apple", "river", "stone", "cloud", "table", "horse", "glass", "paper", "chair", "music", "bread",
         "water", "light", "money", "house", "green", "train", "plant", "night", "dream", "smile", "ocean",
         "field", "sugar"]
DISTRACTORS = ["The sun was warm and the road was long.", "Nobody said a word for a while.",
               "It rained all morning in the city.", "She closed the door and sat down."]
NAMES = ["Mary", "John", "Alice", "Bob", "Tom", "James", "Sarah", "Michael", "Anna", "David", "Emma", "Paul",
         "Kate", "Mark", "Lisa", "Peter"]
PLACES = ["store", "park", "school", "office", "garden", "station"]
OBJECTS = ["drink", "book", "ball", "letter", "gift", "key"]
IOI_TEMPLATES = [
    "When {a} and {b} went to the {place}, {b} gave a {object} to",
    "After {a} and {b} arrived at the {place}, {b} handed the {object} to",
    "While {a} and {b} were working at the {place}, {b} passed a {object} to",
    "Then {a} and {b} had a long argument at the {place}. Afterwards {b} gave a {object} to",
]


def string_repetition(rng: random.Random, length: int = 8) -> Prompt:
    """A random digit string, then the same string without its last digit: the answer is that digit."""
    digits = [rng.choice(DIGITS) for _ in range(length)]
    return Prompt(" ".join(digits + digits[:-1]), " " + digits[-1])


def in_context_repetition(rng: random.Random, length: int = 6) -> Prompt:
    """A list of distinct words, an unrelated sentence, then the list again up to its last word."""
    words = rng.sample(WORDS, length)
    return Prompt(f"{' '.join(words)}. {rng.choice(DISTRACTORS)} {' '.join(words[:-1])}", " " + words[-1])


def pattern_completion(rng: random.Random, length: int = 6) -> Prompt:
    """An arithmetic progression of small numbers (start 1–20, step 2–9): the answer is its next term."""
    start, step = rng.randint(1, 20), rng.randint(2, 9)
    terms = [start + i * step for i in range(length + 1)]
    return Prompt(" ".join(map(str, terms[:-1])), f" {terms[-1]}")


def ioi(rng: random.Random) -> Prompt:
    """Indirect object identification: the name that is not repeated is the answer."""
    a, b = rng.sample(NAMES, 2)
    template = rng.choice(IOI_TEMPLATES)
    return Prompt(template.format(a=a, b=b, place=rng.choice(PLACES), object=rng.choice(OBJECTS)), " " + a)


PROBES: dict[str, Callable[[random.Random], Prompt]] = {
    "repetition": string_repetition,
    "in_context_repetition": in_context_repetition,
    "pattern_completion": pattern_completion,
    "ioi": ioi,
}
SINGLE = {  # the paper's single-prompt mode (its example for string repetition; canonical ones for the rest)
    "repetition": Prompt("0 7 3 1 2 0 2 3 0 7 3 1 2 0 2", " 3"),
    "in_context_repetition": Prompt("apple river stone cloud table horse. The sun was warm and the road was long. "
                                    "apple river stone cloud table", " horse"),
    "pattern_completion": Prompt("2 4 6 8 10 12", " 14"),
    "ioi": Prompt("When Mary and John went to the store, John gave a drink to", " Mary"),
}


def probe_set(name: str, n: int = 64, seed: int = 0, single: bool = False) -> list[Prompt]:
    """``n`` distinct prompts of probe ``name`` (deterministic in ``seed``), or its single prompt."""
    if name not in PROBES:
        raise ValueError(f"unknown probe {name!r}; known probes: {', '.join(sorted(PROBES))}")
    if single:
        return [SINGLE[name]]
    if n < 1:
        raise ValueError(f"the number of prompts must be ≥ 1, got {n}")
    rng = random.Random(f"{name}/{seed}")  # str seeds hash with SHA-512: the same on every run
    prompts: dict[Prompt, None] = {}
    for _ in range(100 * n):  # a few templates have fewer than n distinct prompts
        prompts.setdefault(PROBES[name](rng))
        if len(prompts) == n:
            break
    return list(prompts)
