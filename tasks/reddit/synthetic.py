"""A deterministic synthetic Reddit comments dump (JSON lines, gzip) for offline work.

The generative model (all draws from `np.random.default_rng([seed, stage])`):

* `num_words` pseudo-words with Zipf weights (rank + 2.7)^(-zipf_exponent);
* sparse successor tables (every word has `num_successors` likely next words, the k-th
  with probability ∝ 1/(k + 1)): one shared by all subreddits (common phrases) and one per
  subreddit (its jargon);
* `num_subreddits` subreddits, each boosting its own random `topic_word_fraction` of the
  words by `topic_word_boost`. The next word follows the shared table with probability
  `shared_transition_weight`, the subreddit's table with probability `transition_weight`,
  else the subreddit's unigram distribution. So the next word is learnable from the current
  one (the shared table, which a model meets often enough to learn in a short run) and
  better still from the current one and the subreddit inferred from the words so far;
* `num_authors` authors with log-normal (heavy-tailed) numbers of comments, mean
  `mean_comments_per_author`; each author prefers one or two subreddits; comment lengths
  are log-normal; comments end with "." or "?" most of the time;
* a `deleted_fraction` of comments by `[deleted]`, one `AutoModerator` comment per 100
  comments, and `num_malformed_lines` malformed lines (not JSON, missing or mistyped
  fields) spread through the file, to exercise the loader's counters.

`generate` writes the lines in `created_utc` order to a gzip file with a zero mtime, so the
same config gives the same bytes; `ensure_corpus` caches it under
`~/.cache/dp_fl/reddit_synthetic/<fingerprint>/reddit_comments.jsonl.gz` (temporary file +
rename). The fingerprint covers the config and `GENERATOR_VERSION`.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
from typing import Optional

import numpy as np

from dp_fl import _checks
from dp_fl import files

GENERATOR_VERSION = 2
DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "dp_fl", "reddit_synthetic")
FILENAME = "reddit_comments.jsonl.gz"
_START_UTC = 1_420_070_400  # 2015-01-01.
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "po", "si", "da", "fe", "gu", "ba",
              "zo", "vi", "re", "an", "el", "or", "um", "ix")


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
  """Parameters of the generator (module docstring)."""
  num_authors: int = 200
  mean_comments_per_author: float = 20.0
  author_activity_sigma: float = 1.0
  num_subreddits: int = 8
  num_words: int = 2_000
  zipf_exponent: float = 1.1
  topic_word_fraction: float = 0.1
  topic_word_boost: float = 20.0
  num_successors: int = 3
  shared_transition_weight: float = 0.6
  transition_weight: float = 0.2
  mean_comment_length: float = 25.0
  deleted_fraction: float = 0.03
  num_malformed_lines: int = 10
  seed: int = 0

  def __post_init__(self):
    for name in ("num_authors", "num_subreddits", "num_words", "num_successors"):
      _checks.check_positive_int(name, getattr(self, name))
    _checks.check_nonnegative_int("num_malformed_lines", self.num_malformed_lines)
    _checks.check_nonnegative_int("seed", self.seed)
    for name in ("mean_comments_per_author", "author_activity_sigma", "zipf_exponent",
                 "topic_word_boost", "mean_comment_length"):
      _checks.check_positive(name, getattr(self, name))
    for name in ("topic_word_fraction", "shared_transition_weight", "transition_weight",
                 "deleted_fraction"):
      v = _checks.check_nonnegative(name, getattr(self, name))
      if v > 1:
        raise ValueError(f"`{name}` must be in [0, 1]; got {v!r}.")
    if self.shared_transition_weight + self.transition_weight > 1:
      raise ValueError(
          "`shared_transition_weight` + `transition_weight` must be at most 1 (the rest is "
          f"the unigram draw); got {self.shared_transition_weight!r} + "
          f"{self.transition_weight!r}.")

  def fingerprint(self) -> str:
    """A short hash of the parameters and `GENERATOR_VERSION`: the cache sub-directory."""
    payload = json.dumps({"version": GENERATOR_VERSION, **dataclasses.asdict(self)},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _words(num_words: int, rng: np.random.Generator) -> list[str]:
  words, seen = [], set()
  while len(words) < num_words:
    n = 1 + min(int(rng.geometric(0.5)), 3)
    w = "".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), n))
    if w not in seen:
      seen.add(w)
      words.append(w)
  return words


def _lines(config: SyntheticConfig) -> list[str]:
  """All output lines, in order (comments by created_utc, malformed lines interleaved)."""
  c = config
  words = _words(c.num_words, np.random.default_rng([c.seed, 0]))
  rng = np.random.default_rng([c.seed, 1])
  base = (np.arange(c.num_words) + 2.7) ** (-c.zipf_exponent)
  unigram = np.empty((c.num_subreddits, c.num_words))
  successors = rng.integers(0, c.num_words, (c.num_subreddits, c.num_words,
                                             c.num_successors))
  for s in range(c.num_subreddits):
    boost = np.where(rng.random(c.num_words) < c.topic_word_fraction, c.topic_word_boost, 1.)
    unigram[s] = base * boost / np.sum(base * boost)
    # Successors drawn from the subreddit's unigram, so common words follow common words.
    successors[s] = rng.choice(c.num_words, (c.num_words, c.num_successors), p=unigram[s])
  # The shared table: successors drawn from the plain Zipf weights.
  shared_successors = rng.choice(c.num_words, (c.num_words, c.num_successors),
                                 p=base / base.sum())
  slot_p = 1.0 / (np.arange(c.num_successors) + 1.0)
  slot_cdf = np.cumsum(slot_p / slot_p.sum())
  unigram_cdf = np.cumsum(unigram, axis=1)

  def draw(cdf: np.ndarray) -> int:
    return int(min(np.searchsorted(cdf, rng.random(), side="right"), len(cdf) - 1))

  subreddits = [f"sub_{s:02d}" for s in range(c.num_subreddits)]

  rng = np.random.default_rng([c.seed, 2])
  mu = np.log(c.mean_comments_per_author) - c.author_activity_sigma**2 / 2
  counts = np.maximum(1, np.round(rng.lognormal(mu, c.author_activity_sigma,
                                                c.num_authors))).astype(int)
  records = []
  for a in range(c.num_authors):
    author = f"user_{a:05d}"
    favorite = rng.integers(0, c.num_subreddits, 2)
    times = np.sort(rng.integers(0, 365 * 86_400, counts[a]))
    for t in times:
      s = int(favorite[0] if rng.random() < 0.8 else favorite[1])
      length = max(1, int(rng.lognormal(np.log(c.mean_comment_length) - 0.125, 0.5)))
      ids = [draw(unigram_cdf[s])]
      for _ in range(length - 1):
        u = rng.random()
        if u < c.shared_transition_weight:
          ids.append(int(shared_successors[ids[-1], draw(slot_cdf)]))
        elif u < c.shared_transition_weight + c.transition_weight:
          ids.append(int(successors[s, ids[-1], draw(slot_cdf)]))
        else:
          ids.append(draw(unigram_cdf[s]))
      body = " ".join(words[i] for i in ids)
      u = rng.random()
      body += "." if u < 0.6 else ("?" if u < 0.8 else "")
      r = rng.random()
      name = ("[deleted]" if r < c.deleted_fraction else
              "AutoModerator" if r < c.deleted_fraction + 0.01 else author)
      records.append((int(_START_UTC + t), name, s, body))
  records.sort(key=lambda r: (r[0], r[1], r[3]))
  lines = [json.dumps({"author": name, "body": body, "subreddit": subreddits[s],
                       "created_utc": t, "score": 1}, sort_keys=True)
           for t, name, s, body in records]
  bad = ['{"author": "user_x", "body": "truncated', "not json at all",
         json.dumps({"author": "user_00000", "body": "no time", "subreddit": "sub_00"}),
         json.dumps({"author": 12, "body": "x", "subreddit": "sub_00",
                     "created_utc": _START_UTC}),
         json.dumps(["a", "list"])]
  positions = rng.integers(0, len(lines) + 1, c.num_malformed_lines)
  for k, pos in sorted(enumerate(positions), key=lambda kp: -kp[1]):
    lines.insert(int(pos), bad[k % len(bad)])
  return lines


def generate(config: SyntheticConfig, path: str) -> str:
  """Writes the corpus of `config` to `path` (.jsonl.gz; temporary file + rename)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with files.atomic_output(path) as raw:
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
      f.write(("\n".join(_lines(config)) + "\n").encode("utf-8"))
  return os.fspath(path)


def ensure_corpus(config: Optional[SyntheticConfig] = None,
                  cache_dir: Optional[str] = None) -> str:
  """The path of the cached corpus of `config` (default config), generating it if absent."""
  config = SyntheticConfig() if config is None else config
  root = DEFAULT_CACHE_DIR if cache_dir is None else os.fspath(cache_dir)
  path = os.path.join(os.path.expanduser(root), config.fingerprint(), FILENAME)
  if not os.path.isfile(path):
    generate(config, path)
  return path
