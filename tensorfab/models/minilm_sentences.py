"""English sentences made by code, for MiniLM's int8 calibration and quality checks.

:func:`generated_sentences` joins clauses drawn from small word lists with a seeded
generator, so the same seed always gives the same sentences, of every length the
buckets cover (a target word count each). :data:`SIMILARITY_SET` is a small hand-written
set with clear topics, for ranking checks.
"""

from __future__ import annotations

import numpy as np

_SUBJECTS = ("the old farmer", "a young student", "my neighbour", "the committee",
             "a small dog", "the engineers", "our teacher", "the pilot", "a tired nurse",
             "the children", "the city council", "a famous singer", "the researchers",
             "my brother", "the chef", "a quiet librarian")
_VERBS = ("repaired", "discussed", "painted", "carried", "studied", "cooked", "sold",
          "found", "described", "measured", "ignored", "celebrated", "cleaned", "planned",
          "announced", "photographed", "ate", "played", "installed", "predicted",
          "watched", "bought", "wrote", "delivered", "fixed", "enjoyed", "cancelled",
          "visited", "tested", "ordered", "won", "lost")
_OBJECTS = ("the broken fence", "a new budget", "the morning train", "fresh bread",
            "an ancient map", "the river bridge", "a strange noise", "the football match",
            "the quarterly report", "a wooden boat", "the weather forecast",
            "a chocolate cake", "the hospital roof", "a rare flower", "the school garden",
            "the election results", "a plate of noodles", "a jazz song",
            "the operating system", "a heavy snowstorm", "the championship final",
            "a cheap flight to Rome", "the flu vaccine", "the stock price", "a pizza",
            "the concert tickets", "a broken laptop", "the museum tour", "some apples",
            "the new phone app", "a cup of coffee", "the basketball game")
_TAILS = ("before the storm arrived", "after a long day at work", "with great care",
          "in the middle of the night", "while everyone was watching",
          "despite the heavy rain", "for the third time this year", "near the old harbour",
          "without asking anyone", "during the summer holidays", "as the sun went down",
          "under strict supervision", "on Monday morning", "at the crowded airport",
          "in front of the stadium", "after the server crashed", "before lunch",
          "with a big smile", "in the small kitchen", "when the music started")
_JOINS = ("and", "but", "because", "so", "while", "although")

#: Sentences with clear topics (food, music, weather, sport, computing): each has a
#: closest neighbour on its own topic.
SIMILARITY_SET = (
    "A man is eating a bowl of pasta.",
    "Someone is having spaghetti for dinner.",
    "The band played loud music at the concert.",
    "A guitarist performed songs on stage.",
    "Heavy rain and strong wind are expected tomorrow.",
    "The forecast says a storm is coming.",
    "The striker scored a goal in the final minute.",
    "The football team won the championship match.",
    "The laptop crashed while installing the software update.",
    "My computer froze during the system upgrade.",
)


def _clause(rng: np.random.Generator) -> str:
    words = [_SUBJECTS[rng.integers(len(_SUBJECTS))], _VERBS[rng.integers(len(_VERBS))],
             _OBJECTS[rng.integers(len(_OBJECTS))]]
    if rng.random() < 0.6:
        words.append(_TAILS[rng.integers(len(_TAILS))])
    return " ".join(words)


def generated_sentence(rng: np.random.Generator, words: int) -> str:
    """One sentence of about ``words`` words (at least 2): clauses joined until long
    enough, then cut to ``words`` words, capitalized, with a full stop."""
    text = _clause(rng)
    while len(text.split()) < words:
        text += f" {_JOINS[rng.integers(len(_JOINS))]} {_clause(rng)}"
    cut = " ".join(text.split()[:max(2, words)])
    return cut[0].upper() + cut[1:] + "."


def generated_sentences(count: int, min_words: int = 2, max_words: int = 90,
                        seed: int = 0) -> list[str]:
    """``count`` sentences with word counts spread evenly over
    ``min_words..max_words`` (about 1.1 tokens per word with [CLS] and [SEP]), from
    ``seed``."""
    rng = np.random.default_rng(seed)
    lengths = np.linspace(min_words, max_words, count).round().astype(int)
    return [generated_sentence(rng, int(n)) for n in lengths]


__all__ = ["SIMILARITY_SET", "generated_sentence", "generated_sentences"]
