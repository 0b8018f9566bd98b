"""A deterministic synthetic StackOverflow corpus in TFF's real SQLite format.

The real StackOverflow data (`tff.simulation.datasets.stackoverflow.load_data`, the data of
paper 004 Sec. 4.1 / Table 3) is a download; this module writes a stand-in with the same
on-disk format, so that the same loading code serves both and everything works offline:

* one file, `stackoverflow.sqlite`, with the tables TFF's `SqlClientData` reads:
  `examples(split_name, client_id, serialized_example_proto)` and
  `client_metadata(client_id, split_name, num_examples)`, splits `train`, `heldout`, `test`
  (plus an index on `examples(client_id, split_name)`, which TFF's per-client query uses);
* every example a serialized `tf.train.Example` with the six scalar features TFF parses:
  `creation_date`, `tags`, `title`, `tokens`, `type` (bytes) and `score` (int64); `tokens` is
  one sentence, its tokens separated by single spaces.

So `tff.simulation.datasets.stackoverflow.load_data(cache_dir=ensure_corpus())` reads it
unmodified (TFF skips the download when `<cache_dir>/stackoverflow.sqlite` exists).

The generative model (all draws from `np.random.default_rng([seed, stage])`):

* a vocabulary of `num_words` English-like tokens (frequent English/StackOverflow words and
  punctuation, then pronounceable pseudo-words) with Zipf-Mandelbrot weights
  z_r ∝ (r + 2.7)^(-zipf_exponent) by rank r;
* `num_topics` topics, each boosting a random `topic_word_fraction` of the content words
  (ranks >= 100) by `topic_word_boost`;
* sparse Markov transitions: every word (and the sentence start) has `shared_successors`
  successors shared by all topics and, per topic, `topic_successors` topic-specific ones,
  drawn from the (topic-boosted) Zipf weights, with slot probabilities
  ∝ (k + 1)^(-successor_decay).
  The next word follows the shared table with probability `shared_transition_weight`, the
  topic's table with probability `topic_transition_weight`, else the global Zipf unigram;
* users (clients) with Dirichlet(`topic_concentration`) topic mixtures and log-normal
  (heavy-tailed) numbers of sentences, grouped into posts (question or answer) that share a
  topic, a date, a score, a title and tags; sentence lengths are log-normal, and most
  sentences end with '.', '?' or ':';
* splits shaped like the real ones: `heldout` users are new users (ids divisible by 10),
  `test` users are a subset of the train users with new, later (2018+) posts.

A bigram predictor fit on `train` therefore beats the unigram baseline clearly on `heldout`,
and a recurrent model that also infers the topic from the words so far can do better still.
With the default config (2,000/250/250 clients, about 157,000 sentences, 53 MB, a few
seconds to generate) the best constant word scores 7.2% next-word accuracy on `heldout` and
the bigram predictor 23.4%.

Same config, same bytes, given the same NumPy, SQLite and protobuf (pinned in the project's
`.venv`); the cache key is the config and `GENERATOR_VERSION`.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import time
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import tensorflow as tf

from dp_fl import _checks
from dp_fl import files
from tasks.stackoverflow import database

# Bump when the generator's output for a given config changes: it is part of the cache key.
GENERATOR_VERSION = 1
# Clients generated (and held in memory) at a time: ~800k sentences at the paper's sizes.
CHUNK_CLIENTS = 2000
DATABASE_FILENAME = database.DATABASE_FILENAME  # The format this module writes.
CONFIG_FILENAME = "synthetic_config.json"
SPLITS = database.SPLITS
DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "dp_fl", "stackoverflow_synthetic")

# Frequent English / StackOverflow tokens: ranks 0, 1, 2, ... of the vocabulary.
_COMMON_TOKENS = (
    "the", ".", ",", "to", "i", "a", "is", "you", "it", "and", "of", "in", "this", "that",
    "?", "for", ":", "(", ")", "with", "be", "can", "on", "not", "have", "if", "but", "my",
    "are", "do", "as", "use", "so", "an", "or", "code", "what", "from", "file", "using",
    "will", "get", "there", "would", "how", "which", "your", "all", "at", "one", "when", "by",
    "like", "any", "method", "data", "was", "also", "<URL>", "class", "new", "value", "need",
    "want", "here", "some", "me", "then", "just", "only", "same", "error", "should", "list",
    "string", "no", "set", "does", "we", "try", "work", "way", "make", "=", "'", "\"", "-",
    "function", "object", "server", "page", "user", "example", "problem", "they", "out",
    "java", "table", "up", "time", "text", "call", "more", "name", "type", "web", "run",
)
_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
           "y", "z", "bl", "br", "ch", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "pl", "pr",
           "sc", "sh", "sl", "sp", "st", "str", "th", "tr", "wh")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ee", "io", "ou", "oo")
_CODAS = ("", "", "", "", "n", "r", "s", "t", "l", "m", "nd", "nt", "rt", "st", "ck", "x", "ng")
_SUFFIXES = ("", "", "", "", "", "", "s", "ed", "ing", "er", "ion", "able", "ly")
# Sentence-final punctuation and its probabilities; the rest end without punctuation.
_FINAL_TOKENS = (".", "?", ":")
_FINAL_PROBABILITIES = (0.62, 0.12, 0.08)
_QUESTION_PROBABILITY = 0.35
_FIRST_CONTENT_RANK = 100
_TAGS_PER_TOPIC = 6
# Seconds since the epoch: train and heldout posts before 2018-01-01 (heldout users: any
# date), test posts after it, as in the real splits.
_DATE_START = 1217548800  # 2008-08-01
_DATE_2018 = 1514764800  # 2018-01-01
_DATE_END = 1561939200  # 2019-07-01


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
  """Parameters of the synthetic corpus; the defaults are the corpus `ensure_corpus` makes.

  Attributes:
    seed: seed of every random draw.
    num_train_clients: users in the `train` split.
    num_heldout_clients: users in the `heldout` split (users not in `train`).
    num_test_clients: users in the `test` split: a subset of the train users, with new posts.
    num_words: distinct tokens of the corpus (above the 10,000-word model vocabulary by
      default, so that the out-of-vocabulary bucket is used).
    zipf_exponent: exponent s of the Zipf-Mandelbrot word weights (r + 2.7)^(-s).
    num_topics: number of topics.
    topic_concentration: Dirichlet parameter of each user's topic mixture (small: users
      write about few topics).
    sentences_per_client_median: median number of sentences of a user (log-normal).
    test_sentences_per_client_median: the median of a user's new posts in `test` (None:
      `sentences_per_client_median`; the real test split's users have fewer).
    sentences_per_client_sigma: log-normal sigma of the number of sentences (heavy tail).
    max_sentences_per_client: cap on the number of sentences of a user.
    sentences_per_post_mean: mean number of sentences of a post (1 + Poisson).
    words_per_sentence_median: median sentence length in tokens (log-normal).
    words_per_sentence_sigma: log-normal sigma of the sentence length.
    max_words_per_sentence: cap on the sentence length.
    shared_successors: successors per word in the transition table shared by all topics.
    topic_successors: successors per word in each topic's transition table.
    shared_transition_weight: probability that the next word follows the shared table.
    topic_transition_weight: probability that it follows the topic's table (the remaining
      probability draws it from the global Zipf unigram).
    successor_decay: successor slot k has probability ∝ (k + 1)^(-successor_decay).
    topic_word_fraction: fraction of the content words each topic boosts.
    topic_word_boost: factor by which a topic boosts its words as successors.
  """
  seed: int = 0
  num_train_clients: int = 2000
  num_heldout_clients: int = 250
  num_test_clients: int = 250
  num_words: int = 15000
  zipf_exponent: float = 1.05
  num_topics: int = 24
  topic_concentration: float = 0.2
  sentences_per_client_median: float = 40.0
  test_sentences_per_client_median: Optional[float] = None
  sentences_per_client_sigma: float = 1.0
  max_sentences_per_client: int = 1000
  sentences_per_post_mean: float = 4.0
  words_per_sentence_median: float = 11.0
  words_per_sentence_sigma: float = 0.55
  max_words_per_sentence: int = 60
  shared_successors: int = 4
  topic_successors: int = 8
  shared_transition_weight: float = 0.35
  topic_transition_weight: float = 0.45
  successor_decay: float = 1.5
  topic_word_fraction: float = 0.1
  topic_word_boost: float = 20.0

  def __post_init__(self):
    _checks.check_nonnegative_int("seed", self.seed)
    for name in ("num_train_clients", "num_heldout_clients", "num_test_clients",
                 "num_topics", "max_sentences_per_client", "max_words_per_sentence",
                 "shared_successors", "topic_successors"):
      _checks.check_positive_int(name, getattr(self, name))
    if self.num_test_clients > self.num_train_clients:
      raise ValueError(
          f"`num_test_clients` must be <= `num_train_clients` ({self.num_train_clients}): "
          f"test users are a subset of the train users; got {self.num_test_clients}.")
    min_words = len(_COMMON_TOKENS) + _FIRST_CONTENT_RANK
    if (isinstance(self.num_words, bool) or not isinstance(self.num_words, int)
        or self.num_words < min_words):
      raise ValueError(
          f"`num_words` must be an integer >= {min_words} (the common tokens plus room for "
          f"topic words); got {self.num_words!r}.")
    for name in ("zipf_exponent", "topic_concentration", "sentences_per_client_median",
                 "words_per_sentence_median", "successor_decay"):
      _checks.check_positive(name, getattr(self, name))
    if self.test_sentences_per_client_median is not None:
      _checks.check_positive("test_sentences_per_client_median",
                             self.test_sentences_per_client_median)
    for name in ("sentences_per_client_sigma", "words_per_sentence_sigma"):
      _checks.check_nonnegative(name, getattr(self, name))
    if _checks.check_finite("sentences_per_post_mean", self.sentences_per_post_mean) < 1:
      raise ValueError("`sentences_per_post_mean` must be >= 1 (a post has at least one "
                       f"sentence); got {self.sentences_per_post_mean!r}.")
    shared = _checks.check_nonnegative("shared_transition_weight",
                                       self.shared_transition_weight)
    topical = _checks.check_nonnegative("topic_transition_weight",
                                        self.topic_transition_weight)
    if shared + topical > 1:
      raise ValueError(
          "`shared_transition_weight` + `topic_transition_weight` must be <= 1 (the rest is "
          f"the unigram weight); got {shared} + {topical} = {shared + topical}.")
    _checks.check_half_open_unit("topic_word_fraction", self.topic_word_fraction)
    if _checks.check_finite("topic_word_boost", self.topic_word_boost) < 1:
      raise ValueError(
          f"`topic_word_boost` must be >= 1; got {self.topic_word_boost!r}.")

  def fingerprint(self) -> str:
    """A short hash of the parameters and the generator version: the cache sub-directory."""
    fields = dataclasses.asdict(self)
    if fields["test_sentences_per_client_median"] is None:  # Added later: old keys stay.
      del fields["test_sentences_per_client_median"]
    blob = json.dumps({"generator_version": GENERATOR_VERSION, **fields}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class _Language:
  """The generative model's parameters (drawn from the seed)."""
  words: np.ndarray  # (W,) object array of str, by rank.
  unigram_cdf: np.ndarray  # (W,) cumulative Zipf weights.
  shared_next: np.ndarray  # (W + 1, Ks) successors; row W is the sentence start.
  shared_cdf: np.ndarray  # (Ks,)
  topic_next: np.ndarray  # (T, W + 1, Kt)
  topic_cdf: np.ndarray  # (Kt,)
  topic_tags: tuple[tuple[str, ...], ...]  # (T, _TAGS_PER_TOPIC)


def _make_words(num_words: int, rng: np.random.Generator) -> np.ndarray:
  """The vocabulary by rank: common tokens, then unique pronounceable pseudo-words."""
  words = list(_COMMON_TOKENS)
  seen = set(words)
  while len(words) < num_words:
    rank = len(words)
    syllables = 1 + int(rng.integers(0, 2)) + (rank >= 3000)
    parts = [_ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))]
             for _ in range(syllables)]
    word = ("".join(parts) + _CODAS[rng.integers(len(_CODAS))]
            + _SUFFIXES[rng.integers(len(_SUFFIXES))])
    if word not in seen:
      seen.add(word)
      words.append(word)
  return np.array(words, dtype=object)


def _slot_cdf(num_slots: int, decay: float) -> np.ndarray:
  weights = (np.arange(num_slots) + 1.0) ** -decay
  return np.cumsum(weights / weights.sum())


def _make_language(config: SyntheticConfig) -> _Language:
  rng = np.random.default_rng([config.seed, 1])
  num_words = config.num_words
  words = _make_words(num_words, rng)
  zipf = (np.arange(num_words) + 2.7) ** -config.zipf_exponent
  zipf /= zipf.sum()
  shared_next = rng.choice(num_words, size=(num_words + 1, config.shared_successors),
                           p=zipf).astype(np.int32)
  num_content = num_words - _FIRST_CONTENT_RANK
  topic_size = max(_TAGS_PER_TOPIC, int(round(config.topic_word_fraction * num_content)))
  topic_next = np.empty((config.num_topics, num_words + 1, config.topic_successors), np.int32)
  topic_tags = []
  for topic in range(config.num_topics):
    topic_words = _FIRST_CONTENT_RANK + rng.choice(num_content, size=topic_size,
                                                   replace=False)
    weights = zipf.copy()
    weights[topic_words] *= config.topic_word_boost
    weights /= weights.sum()
    topic_next[topic] = rng.choice(num_words, size=(num_words + 1, config.topic_successors),
                                   p=weights)
    topic_tags.append(tuple(words[np.sort(topic_words)[:_TAGS_PER_TOPIC]]))
  return _Language(
      words=words, unigram_cdf=np.cumsum(zipf), shared_next=shared_next,
      shared_cdf=_slot_cdf(config.shared_successors, config.successor_decay),
      topic_next=topic_next,
      topic_cdf=_slot_cdf(config.topic_successors, config.successor_decay),
      topic_tags=tuple(topic_tags))


def _draw(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
  """Inverse-CDF sampling, robust to cdf[-1] rounding below 1."""
  return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)


def _sample_word_ids(lang: _Language, config: SyntheticConfig, topics: np.ndarray,
                     lengths: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """Markov-chain word ids for many sequences at once; -1 past each sequence's length."""
  num_words = len(lang.words)
  count = len(topics)
  max_length = int(lengths.max()) if count else 0
  out = np.full((count, max_length), -1, dtype=np.int32)
  current = np.full(count, num_words, dtype=np.int32)  # The sentence-start state.
  shared_cut = config.shared_transition_weight
  topic_cut = shared_cut + config.topic_transition_weight
  for step in range(max_length):
    active = np.flatnonzero(lengths > step)
    prev = current[active]
    component = rng.random(active.size)
    u = rng.random(active.size)
    nxt = _draw(lang.unigram_cdf, u).astype(np.int32)
    shared = component < shared_cut
    nxt[shared] = lang.shared_next[prev[shared], _draw(lang.shared_cdf, u[shared])]
    topical = (component >= shared_cut) & (component < topic_cut)
    nxt[topical] = lang.topic_next[topics[active][topical], prev[topical],
                                   _draw(lang.topic_cdf, u[topical])]
    out[active, step] = nxt
    current[active] = nxt
  return out


def _sentences(lang: _Language, config: SyntheticConfig, topics: np.ndarray,
               rng: np.random.Generator) -> list[bytes]:
  """One sentence (space-separated tokens, as bytes) per entry of `topics`."""
  count = len(topics)
  lengths = np.rint(config.words_per_sentence_median
                    * np.exp(config.words_per_sentence_sigma * rng.standard_normal(count)))
  lengths = np.clip(lengths, 1, config.max_words_per_sentence).astype(np.int64)
  final = _draw(np.cumsum(_FINAL_PROBABILITIES + (1 - sum(_FINAL_PROBABILITIES),)),
                rng.random(count))
  final[lengths < 2] = len(_FINAL_TOKENS)  # One-word sentences: no punctuation.
  has_final = final < len(_FINAL_TOKENS)
  ids = _sample_word_ids(lang, config, topics, lengths - has_final, rng)
  words = lang.words
  out = []
  for i in range(count):
    tokens = list(words[ids[i, :lengths[i] - has_final[i]]])
    if has_final[i]:
      tokens.append(_FINAL_TOKENS[final[i]])
    out.append(" ".join(tokens).encode("utf-8"))
  return out


def _titles(lang: _Language, config: SyntheticConfig, topics: np.ndarray,
            rng: np.random.Generator) -> list[bytes]:
  lengths = rng.integers(3, 10, size=len(topics))
  ids = _sample_word_ids(lang, config, topics, lengths, rng)
  return [" ".join(lang.words[ids[i, :lengths[i]]]).encode("utf-8")
          for i in range(len(topics))]


def _format_date(seconds: int) -> bytes:
  return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(seconds))).encode("ascii")


def _split_rows(split: str, client_ids: Sequence[str], mixtures: np.ndarray,
                lang: _Language, config: SyntheticConfig, date_range: tuple[int, int],
                rng: np.random.Generator) -> tuple[list[tuple[str, str, bytes]],
                                                   list[tuple[str, str, int]]]:
  """The `examples` and `client_metadata` rows of some clients of one split."""
  num_clients = len(client_ids)
  median = config.sentences_per_client_median
  if split == "test" and config.test_sentences_per_client_median is not None:
    median = config.test_sentences_per_client_median
  num_sentences = np.rint(median * np.exp(
      config.sentences_per_client_sigma * rng.standard_normal(num_clients)))
  num_sentences = np.clip(num_sentences, 1, config.max_sentences_per_client).astype(np.int64)
  # Posts: sizes 1 + Poisson, the last one cut so that a user has exactly its sentences.
  post_sizes, post_topics, post_clients = [], [], []
  for c in range(num_clients):
    sizes = 1 + rng.poisson(config.sentences_per_post_mean - 1, size=num_sentences[c])
    ends = np.cumsum(sizes)
    num_posts = int(np.searchsorted(ends, num_sentences[c])) + 1
    sizes = sizes[:num_posts]
    sizes[-1] -= ends[num_posts - 1] - num_sentences[c]
    post_sizes.append(sizes)
    post_topics.append(rng.choice(config.num_topics, size=num_posts, p=mixtures[c]))
    post_clients.append(np.full(num_posts, c))
  post_sizes = np.concatenate(post_sizes)
  post_topics = np.concatenate(post_topics)
  post_clients = np.concatenate(post_clients)
  num_posts = len(post_sizes)
  post_dates = rng.integers(date_range[0], date_range[1], size=num_posts)
  # Dates increase within a user (the stored order is the user's order).
  post_dates = post_dates[np.lexsort((post_dates, post_clients))]
  post_scores = rng.poisson(2.0, size=num_posts) - rng.poisson(0.4, size=num_posts)
  post_is_question = rng.random(num_posts) < _QUESTION_PROBABILITY
  num_tags = rng.integers(1, 5, size=num_posts)
  tag_picks = rng.random((num_posts, _TAGS_PER_TOPIC)).argsort(axis=1)
  titles = _titles(lang, config, post_topics, rng)
  sentences = _sentences(lang, config, np.repeat(post_topics, post_sizes), rng)

  examples = []
  example = tf.train.Example()
  feature = example.features.feature
  for name in ("creation_date", "tags", "title", "tokens", "type"):
    feature[name].bytes_list.value.append(b"")
  feature["score"].int64_list.value.append(0)
  position = 0
  for p in range(num_posts):
    tags = lang.topic_tags[post_topics[p]]
    feature["creation_date"].bytes_list.value[0] = _format_date(post_dates[p])
    feature["score"].int64_list.value[0] = int(post_scores[p])
    feature["tags"].bytes_list.value[0] = "|".join(
        tags[i] for i in tag_picks[p, :num_tags[p]]).encode("utf-8")
    feature["title"].bytes_list.value[0] = titles[p]
    feature["type"].bytes_list.value[0] = b"question" if post_is_question[p] else b"answer"
    client_id = client_ids[post_clients[p]]
    for sentence in sentences[position:position + post_sizes[p]]:
      feature["tokens"].bytes_list.value[0] = sentence
      examples.append((split, client_id, example.SerializeToString(deterministic=True)))
    position += post_sizes[p]
  metadata = [(client_ids[c], split, int(num_sentences[c])) for c in range(num_clients)]
  return examples, metadata


def _chunked_rows(split: str, client_ids: Sequence[str], mixtures: np.ndarray,
                  lang: _Language, config: SyntheticConfig, date_range: tuple[int, int],
                  stage: int) -> Iterator[tuple[str, list, list]]:
  """The rows of one split, `CHUNK_CLIENTS` clients at a time (bounded memory at any size).

  Chunk i draws from `default_rng([seed, stage, i])`, chunk 0 from `[seed, stage]`: a split
  of at most `CHUNK_CLIENTS` clients is the one-chunk corpus of `GENERATOR_VERSION` 1, byte
  for byte.
  """
  for i, start in enumerate(range(0, len(client_ids), CHUNK_CLIENTS)):
    rng = np.random.default_rng([config.seed, stage] + ([i] if i else []))
    stop = start + CHUNK_CLIENTS
    yield (split, *_split_rows(split, client_ids[start:stop], mixtures[start:stop], lang,
                               config, date_range, rng))


def _all_rows(config: SyntheticConfig) -> Iterator[tuple[str, list, list]]:
  """(split, examples rows, client_metadata rows) for train, heldout and test, in chunks of
  clients (several per split when a split has more than `CHUNK_CLIENTS`)."""
  lang = _make_language(config)
  users_rng = np.random.default_rng([config.seed, 2])
  alpha = np.full(config.num_topics, config.topic_concentration)
  # Real StackOverflow: held-out users are those with user_id % 10 == 0.
  train_numbers = np.arange(1, config.num_train_clients * 10 // 9 + 10)
  train_numbers = train_numbers[train_numbers % 10 != 0][:config.num_train_clients]
  train_ids = [f"{n:08d}" for n in train_numbers]
  heldout_ids = [f"{10 * (k + 1):08d}" for k in range(config.num_heldout_clients)]
  train_mix = users_rng.dirichlet(alpha, size=config.num_train_clients)
  heldout_mix = users_rng.dirichlet(alpha, size=config.num_heldout_clients)
  test_users = np.sort(users_rng.choice(config.num_train_clients,
                                        size=config.num_test_clients, replace=False))
  test_ids = [train_ids[i] for i in test_users]
  yield from _chunked_rows("train", train_ids, train_mix, lang, config,
                           (_DATE_START, _DATE_2018), 3)
  yield from _chunked_rows("heldout", heldout_ids, heldout_mix, lang, config,
                           (_DATE_START, _DATE_END), 4)
  yield from _chunked_rows("test", test_ids, train_mix[test_users], lang, config,
                           (_DATE_2018, _DATE_END), 5)


def generate(config: SyntheticConfig, directory: str,
             progress: Optional[Callable[[str, int, int], None]] = None,
             index: bool = True) -> str:
  """Writes the corpus of `config` to `<directory>/stackoverflow.sqlite`; returns its path.

  The database is written to a temporary file in `directory` and renamed into place, so a
  killed generation never leaves a partial `stackoverflow.sqlite`. Same config, same bytes.
  A summary (config, generator version, clients and examples per split) goes to
  `<directory>/synthetic_config.json`.

  Args:
    config: the corpus parameters.
    directory: where to write (created if missing); an existing database is replaced.
    progress: called after each chunk with (split, clients written in it so far, clients
      of the split).
    index: write the (client_id, split_name) index of `examples` (False: the file as
      TFF's own `save_to_sql_client_data` writes it, without one).

  Returns:
    The path of the database.
  """
  if not isinstance(config, SyntheticConfig):
    raise ValueError(f"`config` must be a SyntheticConfig; got {type(config).__name__}.")
  summary = {"generator_version": GENERATOR_VERSION, "fingerprint": config.fingerprint(),
             "config": dataclasses.asdict(config)}
  totals = {"train": config.num_train_clients, "heldout": config.num_heldout_clients,
            "test": config.num_test_clients}

  def rows():
    done = collections.Counter()
    for split, examples, metadata in _all_rows(config):
      yield split, examples, metadata
      done[split] += len(metadata)
      if progress is not None:
        progress(split, done[split], totals[split])

  return database.write_database(directory, rows(), CONFIG_FILENAME, summary, index=index)


def corpus_directory(config: Optional[SyntheticConfig] = None,
                     cache_dir: Optional[str] = None) -> str:
  """`<cache_dir>/<config fingerprint>`: where `ensure_corpus` keeps the corpus of `config`."""
  config = SyntheticConfig() if config is None else config
  if not isinstance(config, SyntheticConfig):
    raise ValueError(f"`config` must be a SyntheticConfig or None; got "
                     f"{type(config).__name__}.")
  root = DEFAULT_CACHE_DIR if cache_dir is None else os.fspath(cache_dir)
  return os.path.join(os.path.abspath(os.path.expanduser(root)), config.fingerprint())


def ensure_corpus(config: Optional[SyntheticConfig] = None,
                  cache_dir: Optional[str] = None) -> str:
  """Returns a directory DIR holding the corpus of `config`, generating it on first use.

  `tff.simulation.datasets.stackoverflow.load_data(cache_dir=DIR)` reads it (as does
  `tasks.stackoverflow.database.load_client_data(DIR)`). The corpus is cached under
  `<cache_dir>/<config.fingerprint()>/` (default cache_dir:
  `~/.cache/dp_fl/stackoverflow_synthetic`), so later calls return at once; concurrent
  callers wait on a file lock instead of generating twice.

  Args:
    config: the corpus parameters (default: `SyntheticConfig()`).
    cache_dir: root of the cache.

  Returns:
    The corpus directory.
  """
  directory = corpus_directory(config, cache_dir)
  files.build_once(os.path.join(directory, DATABASE_FILENAME),
                   lambda _: generate(SyntheticConfig() if config is None else config,
                                      directory),
                   "the synthetic StackOverflow corpus cache",
                   "pass --synthetic_cache_dir DIR (a writable directory), or set HOME to one")
  return directory
