"""StackOverflow vocabulary and token ids (TFF's `word_prediction_preprocessing` layout).

The vocabulary: the `vocab_size` most frequent words (10,000 in paper 004 Sec. 4.1, Table 3),
from a word-count file in the format of TFF's `stackoverflow.word_count` or counted from
the train split of the database (`load_vocab`).

Token ids (V = len(vocab), B = num_oov_buckets; `token_ids`, `TokenIds`):

    0                 padding (pad)
    1 .. V            the words of the vocabulary, most frequent first (vocab[i] -> i + 1)
    V+1 .. V+B        OOV buckets (words not in the vocabulary are hashed into one)
    V+B+1             beginning of sentence (BOS)
    V+B+2             end of sentence (EOS)

so the model has V + B + 3 classes (10,004 at the paper's sizes). `accuracy_masks` names
the targets each accuracy metric of TFF's word-prediction task leaves out.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
from typing import Any, Mapping, Optional, Sequence

import tensorflow as tf
import tensorflow_federated as tff
# TFF 0.87 exports only `create_word_prediction_task` (which downloads the word counts) from
# `tff.simulation.baselines.stackoverflow`; its preprocessing module is that task's
# implementation, used here as is.
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_preprocessing

from dp_fl import _checks
from dp_fl import files
from tasks.stackoverflow import _messages
from tasks.stackoverflow import database

# Word counts computed from the train split, cached next to the database, in the format of
# TFF's `stackoverflow.word_count` ("WORD COUNT" lines, most frequent first).
TRAIN_WORD_COUNT_FILENAME = "stackoverflow.train.word_count"

DEFAULT_VOCAB_SIZE = tff.simulation.baselines.stackoverflow.DEFAULT_WORD_VOCAB_SIZE  # 10000
DEFAULT_NUM_OOV_BUCKETS = 1

# Metric names (those of TFF's word-prediction baseline task).
NUM_TOKENS = "num_tokens"
ACCURACY = "accuracy"
ACCURACY_WITHOUT_OOV = "accuracy_without_out_of_vocab"
ACCURACY_WITHOUT_OOV_OR_EOS = "accuracy_without_out_of_vocab_or_end_of_sentence"

# Records checked per batched parse when counting words.
_CHECK_CHUNK = 1 << 16

_logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Token ids.


@dataclasses.dataclass(frozen=True)
class TokenIds:
  """The token-id layout (see the module docstring).

  Attributes:
    vocab_size: V, the number of vocabulary words (ids 1..V).
    num_oov_buckets: B, the number of OOV buckets.
    pad: the padding id, 0.
    oov: the OOV bucket ids, V+1..V+B.
    bos: the beginning-of-sentence id, V+B+1.
    eos: the end-of-sentence id, V+B+2.
  """
  vocab_size: int
  num_oov_buckets: int
  pad: int
  oov: tuple[int, ...]
  bos: int
  eos: int

  @property
  def extended_vocab_size(self) -> int:
    """Number of model classes: V + B + 3 (pad, BOS, EOS)."""
    return self.vocab_size + self.num_oov_buckets + 3


def token_ids(vocab_size: int, num_oov_buckets: int = DEFAULT_NUM_OOV_BUCKETS) -> TokenIds:
  """The token-id layout for a vocabulary of `vocab_size` words (TFF's special tokens)."""
  vocab_size = _checks.check_positive_int("vocab_size", vocab_size)
  num_oov_buckets = _checks.check_positive_int("num_oov_buckets", num_oov_buckets)
  special = word_prediction_preprocessing.get_special_tokens(vocab_size, num_oov_buckets)
  return TokenIds(vocab_size=vocab_size, num_oov_buckets=num_oov_buckets,
                  pad=int(special.padding), oov=tuple(int(t) for t in special.out_of_vocab),
                  bos=int(special.beginning_of_sentence), eos=int(special.end_of_sentence))


def accuracy_masks(ids: TokenIds) -> dict[str, tuple[int, ...]]:
  """Accuracy metric name -> the target ids it leaves out.

  `accuracy` leaves out padding; `accuracy_without_out_of_vocab` also the OOV buckets;
  `accuracy_without_out_of_vocab_or_end_of_sentence` also BOS and EOS (BOS is never a
  target, so this equals TFF's metric of that name, which masks pad, OOV and EOS).
  """
  return {
      ACCURACY: (ids.pad,),
      ACCURACY_WITHOUT_OOV: (ids.pad, *ids.oov),
      ACCURACY_WITHOUT_OOV_OR_EOS: (ids.pad, *ids.oov, ids.bos, ids.eos),
  }


# ---------------------------------------------------------------------------------------------
# Vocabulary.


def read_word_counts(path: str, max_words: Optional[int] = None) -> dict[str, int]:
  """Reads a word-count file in the format of TFF's `stackoverflow.word_count`.

  Every line is `WORD COUNT`: a word without whitespace, whitespace, a non-negative integer;
  words are distinct and counts non-increasing (most frequent first). Like TFF's
  `load_word_counts`, only the first `max_words` lines are read (and checked).

  Args:
    path: the file.
    max_words: how many lines to read (all when None).

  Returns:
    word -> count, in file order.
  """
  if max_words is not None:
    max_words = _checks.check_positive_int("max_words", max_words)
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise ValueError(
        f"Word count file {path} does not exist (or is not a file). Expected a file in the "
        "format of TFF's stackoverflow.word_count ('WORD COUNT' lines, most frequent first); "
        "pass another word_count_file, or none to count the train split.")
  fmt = ("expected 'WORD COUNT' (a word without spaces, whitespace, a non-negative integer), "
         "as in TFF's stackoverflow.word_count")
  counts: dict[str, int] = {}
  previous = None
  try:
    with open(path, encoding="utf-8") as f:
      for line_number, line in enumerate(f, start=1):
        fields = line.split()
        where = f"Word count file {path}, line {line_number}"
        if len(fields) != 2:
          raise ValueError(f"{where}: {fmt}; got {line.rstrip(chr(10))!r}.")
        word, count_text = fields
        if not (count_text.isascii() and count_text.isdigit()):
          raise ValueError(f"{where}: the count must be a non-negative integer; {fmt}; got "
                           f"{line.rstrip(chr(10))!r}.")
        count = int(count_text)
        if word in counts:
          raise ValueError(f"{where}: word {word!r} repeats an earlier line; expected each "
                           "word once.")
        if previous is not None and count > previous:
          raise ValueError(f"{where}: count {count} of {word!r} exceeds the previous line's "
                           f"{previous}; expected counts in non-increasing order (most "
                           "frequent first).")
        counts[word] = count
        previous = count
        if max_words is not None and len(counts) >= max_words:
          break
  except UnicodeDecodeError as e:
    raise ValueError(f"Word count file {path} is not UTF-8 text ({e}); {fmt}.") from e
  if not counts:
    raise ValueError(f"Word count file {path} is empty; {fmt}.")
  return counts


def write_word_counts(path: str, counts: Mapping[str, int]) -> None:
  """Writes `counts` (in order) as `WORD COUNT` lines, atomically (temp file + rename)."""
  files.atomic_write_text(
      os.fspath(path), "".join(f"{word} {count}\n" for word, count in counts.items()))


def count_train_words(data_dir: str) -> dict[str, int]:
  """Word counts of the train split, as TFF's `stackoverflow.word_count` defines them.

  The count of a word is the number of train clients with at least one sentence containing
  it (ties: more occurrences first, then alphabetical). Reads the database directly
  (sqlite3, then TFF's parser a client at a time, `database.check_records`): seconds for the
  synthetic corpus; use the real word-count file for the real data. Bad records (those the
  training clients quarantine) are left out, and their number logged.

  Args:
    data_dir: the directory holding `stackoverflow.sqlite`.

  Returns:
    word -> count, most frequent first.
  """
  clients: collections.Counter = collections.Counter()
  occurrences: collections.Counter = collections.Counter()
  bad: collections.Counter = collections.Counter()
  current, words = None, set()  # The client being counted and its words so far.

  def count(rows: list[tuple[str, bytes]]) -> None:
    nonlocal current, words
    result = database.check_records([blob for _, blob in rows])
    bad.update(result.reasons())
    owners = (client_id for (client_id, _), ok in zip(rows, result.good) if ok)
    for client_id, tokens in zip(owners, result.tokens):
      if client_id != current:
        clients.update(words)
        current, words = client_id, set()
      sentence = tokens.decode("utf-8").split(" ")
      occurrences.update(sentence)
      words.update(sentence)

  with database.open_database(data_dir) as (path, connection):
    rows = []
    for client_id, blob in connection.execute(
        "SELECT client_id, serialized_example_proto FROM examples "
        "WHERE split_name = 'train' ORDER BY client_id;"):
      rows.append((client_id, bytes(blob)))
      if len(rows) == _CHECK_CHUNK:
        count(rows)
        rows = []
    count(rows)
  clients.update(words)
  if bad:
    _logger.warning("%s: %d bad train records left out of the word counts %s.", path,
                    sum(bad.values()), dict(sorted(bad.items())))
  clients.pop("", None)  # Double spaces; an empty word cannot be written as a line.
  ordered = sorted(clients, key=lambda w: (-clients[w], -occurrences[w], w))
  return {word: clients[word] for word in ordered}


def load_vocab(data_dir: str, vocab_size: int = DEFAULT_VOCAB_SIZE,
               word_count_file: Optional[str] = None) -> list[str]:
  """The `vocab_size` most frequent words: the vocabulary of the token ids.

  With `word_count_file` (e.g. TFF's real `stackoverflow.word_count`), its first
  `vocab_size` words, as TFF's `load_word_counts` (which needs a download) reads them.
  Without it, the counts of the train split (`count_train_words`), computed once and cached
  in `<data_dir>/stackoverflow.train.word_count` (same format; recomputed when the database
  is newer than the cache).

  Args:
    data_dir: the directory holding `stackoverflow.sqlite`.
    vocab_size: number of words (V; 10,000 in the paper's setting).
    word_count_file: optional word-count file.

  Returns:
    The words, most frequent first (fewer than `vocab_size` when the corpus has fewer
    distinct words: a warning is logged, and the model must use `len(vocab)`).
  """
  vocab_size = _checks.check_positive_int("vocab_size", vocab_size)
  if word_count_file is not None:
    counts = read_word_counts(word_count_file, max_words=vocab_size)
  else:
    database_file = database.database_path(data_dir)
    cache = os.path.join(os.path.dirname(database_file), TRAIN_WORD_COUNT_FILENAME)
    if (os.path.isfile(cache)
        and os.stat(cache).st_mtime_ns >= os.stat(database_file).st_mtime_ns):
      counts = read_word_counts(cache, max_words=vocab_size)
    else:
      counts = count_train_words(data_dir)
      try:
        write_word_counts(cache, counts)
      except OSError as e:
        _logger.warning("Could not cache the train word counts in %s (%s); they will be "
                        "counted again next time.", cache, e)
  vocab = list(counts)[:vocab_size]
  if len(vocab) < vocab_size:
    _logger.warning("The vocabulary has %d words, fewer than vocab_size=%d: the corpus has no "
                    "more distinct words.", len(vocab), vocab_size)
  return vocab


def check_vocab(vocab: Any) -> list[str]:
  """`vocab` as a list, checked: non-empty, distinct words without whitespace."""
  if isinstance(vocab, str) or not isinstance(vocab, Sequence) or not vocab:
    raise ValueError(f"`vocab` must be a non-empty list of words (see load_vocab); got "
                     f"{type(vocab).__name__}.")
  vocab = list(vocab)
  bad = [w for w in vocab if not isinstance(w, str) or not w or any(c.isspace() for c in w)]
  if bad:
    raise ValueError(f"`vocab` must hold non-empty words without whitespace; got "
                     f"{_messages.listed(bad)}.")
  if len(set(vocab)) != len(vocab):
    duplicates = [w for w, n in collections.Counter(vocab).items() if n > 1]
    raise ValueError(
        f"`vocab` must hold distinct words; got repeated {_messages.listed(duplicates)}.")
  return vocab
