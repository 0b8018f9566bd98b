"""The Reddit comments data of paper 001 (Sec. 3 and App. B): parsing to federated batches.

Input: the public Reddit comments dump as JSON lines, one comment object per line, with at
least the fields `author` (str), `body` (str), `subreddit` (str) and `created_utc` (int, or
a string of decimal digits as in some monthly dumps); files plain, gzip or bzip2. A file is
read as what its first bytes say it is (gzip 1f 8b, bzip2 "BZh", else plain text), with a
note in the summary when its name says otherwise; an xz, zstd or zip archive is a
`ValueError` (decompress it first), as is a truncated or corrupt compressed stream (the
message names the file and the last line read).

Pipeline (each step a public function):

1. `read_comments` streams comments and skips malformed lines, counting them by reason in a
   `ReadSummary` (`not_json`, `not_object`, `missing_<field>`, `wrong_type_<field>`,
   `invalid_author`); a file with more than `max_malformed_fraction` malformed lines is a
   `ValueError`. Comments by `[deleted]` / `[removed]` authors, with a `[deleted]` /
   `[removed]` body, or (by default) by `AutoModerator` are dropped and counted too.
   Authors must match `[A-Za-z0-9_-]+` (Reddit's user-name alphabet), because TFF's
   `SqlClientData` pastes client ids into its SQL queries unquoted.
2. `tokenize`: lowercase, then the regex `[a-z0-9]+(?:'[a-z0-9]+)*|[^\\sa-z0-9]`: runs of
   letters/digits (with inner apostrophes, "don't") are words, every other non-space
   character is a token of its own ("hi!!" -> "hi", "!", "!").
3. `split_users` groups comments by author (the unit of privacy) in `created_utc` order
   (ties: body) and holds out random posts for the test set, as paper 001 Sec. 3 does
   ("a relatively small test set ... formed from random held-out posts"): a post is held
   out iff a hash of (seed, author, created_utc, body) falls below `test_fraction`, so the
   split does not depend on file order. Training users with fewer than `tokens_per_user`
   (1,600) word tokens are removed and the rest truncated to exactly 1,600 tokens (their
   earliest; App. B). The test split holds the held-out posts of every kept author
   (training user or not), untruncated. Fewer training users than `min_users` is a
   `ValueError`.
4. `build_vocab`: the `vocab_size` (10,000) most frequent training tokens, ties by word.
   (The paper took its dictionary from a separate public corpus; counting our training
   split is the offline stand-in and is not private.)
5. `user_windows` / `make_sql_client_data` / `load_client_data` / `batch_dataset`: each
   post becomes [BOS] w_1 ... w_n [EOS] (App. B: implicit BOS and EOS; a post cut by the
   truncation gets no EOS), a user's posts are concatenated and cut into windows of
   `unroll + 1` ids overlapping by one, x = window[:-1], y = window[1:], the last window
   padded with pad. The windows are written once with TFF's
   `save_to_sql_client_data` (splits "train" and "test", features "x", "y" int64
   [unroll]) and read with `load_and_parse_sql_client_data`; `batch_dataset` batches them
   (paper: unroll 10, batch 8) with no shuffling, so each user's dataset is deterministic.

Token-id layout (`TokenIds`, V = vocab_size; TFF's StackOverflow layout with one OOV id):

    0          pad (never a target that counts)
    1 .. V     vocabulary words, by decreasing training frequency
    V + 1      UNK (out-of-vocabulary word)
    V + 2      BOS
    V + 3      EOS
    V + 4      classes in all (10,004 at V = 10,000)
"""

from __future__ import annotations

import bz2
import collections
import contextlib
import dataclasses
import gzip
import hashlib
import json
import os
import re
import logging
import sqlite3
import struct
import sys
import zlib
from typing import Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl import _checks
from dp_fl import files
from tasks import sql_client_data

PAPER_VOCAB_SIZE = 10_000
PAPER_TOKENS_PER_USER = 1_600
PAPER_UNROLL = 10
PAPER_BATCH_SIZE = 8
DEFAULT_TEST_FRACTION = 0.05
DEFAULT_MAX_MALFORMED_FRACTION = 0.5

REQUIRED_FIELDS = ("author", "body", "subreddit", "created_utc")
DELETED_AUTHORS = frozenset({"[deleted]", "[removed]"})
DELETED_BODIES = frozenset({"[deleted]", "[removed]"})
AUTOMODERATOR = "AutoModerator"
TRAIN = "train"
TEST = "test"

_logger = logging.getLogger(__name__)

_AUTHOR_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_TOKEN_RE = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*|[^\sa-z0-9]")


@dataclasses.dataclass(frozen=True)
class Comment:
  """One well-formed comment."""
  author: str
  body: str
  subreddit: str
  created_utc: int


@dataclasses.dataclass
class ReadSummary:
  """Counts of what `read_comments` saw, over all files and per file.

  Attributes:
    lines: non-blank lines read.
    comments: comments yielded.
    malformed: malformed lines by reason.
    dropped: well-formed comments dropped, by reason (`deleted_author`, `deleted_body`,
      `automoderator`).
    per_file: file path -> {"format": what its bytes are ("plain", "gzip", "bzip2"),
      "note": present when the name says another format, "lines": non-blank lines,
      "comments": comments kept, "malformed": {reason: lines}, "dropped": {reason: count}}.
  """
  lines: int = 0
  comments: int = 0
  malformed: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  dropped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  per_file: dict = dataclasses.field(default_factory=dict)

  @property
  def num_malformed(self) -> int:
    return sum(self.malformed.values())

  @property
  def num_dropped(self) -> int:
    return sum(self.dropped.values())

  def __str__(self) -> str:
    return (f"{self.lines} lines, {self.comments} comments kept, {self.num_malformed} "
            f"malformed {dict(sorted(self.malformed.items()))}, dropped "
            f"{dict(sorted(self.dropped.items()))}")

  def as_dict(self) -> dict:
    """The counts as a JSON-able dict (totals, by reason, per file)."""
    return {"lines": self.lines, "comments": self.comments,
            "malformed_lines": self.num_malformed,
            "malformed_by_reason": dict(sorted(self.malformed.items())),
            "dropped_comments": self.num_dropped,
            "dropped_by_reason": dict(sorted(self.dropped.items())),
            "per_file": {path: dict(entry) for path, entry in self.per_file.items()}}


# First bytes -> (format, how to read it, or None: refused with this fix).
_MAGIC = (
    (b"\x1f\x8b", "gzip", ".gz"),
    (b"BZh", "bzip2", ".bz2"),
    (b"\xfd7zXZ\x00", "xz", None),
    (b"\x28\xb5\x2f\xfd", "zstd", None),
    (b"PK\x03\x04", "zip", None),
)
_DECOMPRESS = {"xz": "`unxz -k FILE`", "zstd": "`zstd -d --long=31 FILE`",
               "zip": "`unzip FILE`"}
_SUFFIX_FORMATS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd", ".zip": "zip"}


def detect_format(path: str) -> tuple[str, Optional[str]]:
  """(what `path`'s first bytes say it is: "plain", "gzip" or "bzip2"; a note or None).

  The note says when the name's suffix claims another format. An xz, zstd or zip archive
  is a `ValueError` naming the file, what it is and how to decompress it.
  """
  with open(path, "rb") as f:
    head = f.read(8)
  found = "plain"
  for magic, name, _ in _MAGIC:
    if head.startswith(magic):
      found = name
      break
  if found in _DECOMPRESS:
    raise ValueError(
        f"File {path!r} is a {found} archive (it starts with {head[:6]!r}), which this "
        f"reader does not open; decompress it ({_DECOMPRESS[found]}) and pass the JSON-lines "
        "file (plain, .gz or .bz2).")
  claimed = next((fmt for suffix, fmt in _SUFFIX_FORMATS.items() if path.endswith(suffix)),
                 "plain")
  note = None
  if claimed != found:
    note = (f"named as {claimed} but its bytes are {found} "
            f"{'text' if found == 'plain' else 'compressed'}: read as {found}")
  return found, note


def _open_text(path: str, fmt: str):
  """Opens a file of format `fmt` for reading text lines (UTF-8, undecodable -> U+FFFD)."""
  if fmt == "gzip":
    return gzip.open(path, "rt", encoding="utf-8", errors="replace")
  if fmt == "bzip2":
    return bz2.open(path, "rt", encoding="utf-8", errors="replace")
  return open(path, "rt", encoding="utf-8", errors="replace")


def parse_line(line: str) -> tuple[Optional[Comment], Optional[str]]:
  """(comment, None) for a well-formed line, else (None, malformed reason)."""
  try:
    obj = json.loads(line)
  except ValueError:
    return None, "not_json"
  if not isinstance(obj, dict):
    return None, "not_object"
  for field in REQUIRED_FIELDS:
    if field not in obj or obj[field] is None:
      return None, f"missing_{field}"
  for field in ("author", "body", "subreddit"):
    if not isinstance(obj[field], str):
      return None, f"wrong_type_{field}"
  created = obj["created_utc"]
  if isinstance(created, str) and created.isdigit():
    created = int(created)
  if isinstance(created, bool) or not isinstance(created, int):
    return None, "wrong_type_created_utc"
  author = obj["author"]
  if author not in DELETED_AUTHORS and not _AUTHOR_RE.match(author):
    return None, "invalid_author"
  return Comment(author, obj["body"], obj["subreddit"], created), None


def read_comments(paths: Sequence[str] | str, summary: Optional[ReadSummary] = None, *,
                  max_malformed_fraction: float = DEFAULT_MAX_MALFORMED_FRACTION,
                  drop_automoderator: bool = True) -> Iterator[Comment]:
  """Streams the well-formed, kept comments of JSON-lines files, in file and line order.

  Args:
    paths: one path or a sequence of paths (plain, `.gz` or `.bz2`).
    summary: a `ReadSummary` to add the counts to (the generator fills it as it goes).
    max_malformed_fraction: a file with more than this fraction of malformed non-blank
      lines raises `ValueError` once it has been read (its good comments have been
      yielded by then; the caller's result is meant to be discarded).
    drop_automoderator: also drop comments by `AutoModerator`.

  Yields:
    `Comment`s.

  Raises:
    ValueError: no paths, a missing file, a mostly-malformed file, an archive it does not
      open (xz, zstd, zip), or a truncated or corrupt compressed stream (the message names
      the file and the last line read).
  """
  if isinstance(paths, (str, os.PathLike)):
    paths = [paths]
  paths = [os.fspath(p) for p in paths]
  if not paths:
    raise ValueError("`paths` must name at least one JSON-lines file; got [].")
  max_malformed_fraction = _checks.check_nonnegative("max_malformed_fraction",
                                                     max_malformed_fraction)
  if max_malformed_fraction > 1:
    raise ValueError(f"`max_malformed_fraction` must be in [0, 1]; got "
                     f"{max_malformed_fraction!r}.")
  summary = ReadSummary() if summary is None else summary
  for path in paths:
    if not os.path.isfile(path):
      raise ValueError(f"`paths` entry {path!r} is not a file; pass existing JSON-lines "
                       "files (plain, .gz or .bz2).")
    fmt, note = detect_format(path)
    if note is not None:
      _logger.warning("%s: %s.", path, note)
    entry = {"format": fmt, **({"note": note} if note else {}), "lines": 0, "comments": 0,
             "malformed": {}, "dropped": {}}
    summary.per_file[path] = entry
    reasons = collections.Counter()
    dropped = collections.Counter()
    lines = 0
    with _open_text(path, fmt) as f:
      lines_read = _lines_or_value_error(f, path, fmt)
      for line in lines_read:
        if not line.strip():
          continue
        lines += 1
        comment, reason = parse_line(line)
        if comment is None:
          reasons[reason] += 1
          continue
        if comment.author in DELETED_AUTHORS:
          dropped["deleted_author"] += 1
        elif comment.body.strip() in DELETED_BODIES:
          dropped["deleted_body"] += 1
        elif drop_automoderator and comment.author == AUTOMODERATOR:
          dropped["automoderator"] += 1
        else:
          summary.comments += 1
          entry["comments"] += 1
          yield comment
    summary.lines += lines
    summary.malformed.update(reasons)
    summary.dropped.update(dropped)
    entry.update(lines=lines, malformed=dict(sorted(reasons.items())),
                 dropped=dict(sorted(dropped.items())))
    bad = sum(reasons.values())
    if lines and bad > max_malformed_fraction * lines:
      raise ValueError(
          f"File {path!r} is mostly malformed: {bad} of {lines} non-blank lines "
          f"({bad / lines:.0%}) are not valid comments {dict(sorted(reasons.items()))}, "
          f"more than max_malformed_fraction={max_malformed_fraction}. Check that it is "
          "a Reddit comments JSON-lines file, or raise `max_malformed_fraction`.")


def _lines_or_value_error(f, path: str, fmt: str) -> Iterator[str]:
  """The lines of `f`; a truncated or corrupt compressed stream -> ValueError (file, line)."""
  line_number = 0
  try:
    for line in f:
      line_number += 1
      yield line
  except (EOFError, zlib.error, OSError) as e:
    if isinstance(e, OSError) and e.errno is not None:
      raise  # A real I/O error (disk, permissions), not the file's content.
    raise ValueError(
        f"File {path!r} ({fmt}) is truncated or corrupt: reading stopped after line "
        f"{line_number} ({type(e).__name__}: {e}). Re-download it, or check it with "
        f"`{'gzip' if fmt == 'gzip' else 'bzip2'} -t`; a partial file can be read "
        "once its complete lines are recompressed.") from e


def tokenize(text: str) -> list[str]:
  """Lowercased word and punctuation tokens (see the module docstring)."""
  return _TOKEN_RE.findall(text.lower())


@dataclasses.dataclass(frozen=True)
class UserSplits:
  """Per-author posts (token lists, `created_utc` order) of the two splits.

  Attributes:
    train: training author -> posts; exactly `tokens_per_user` tokens in all, the last post
      possibly cut (then `train_truncated[author]` is True).
    train_truncated: author -> whether the last training post was cut.
    test: author -> held-out posts (untruncated).
    summary: the `ReadSummary` of the input.
    num_too_small: authors removed from training for having < tokens_per_user tokens.
  """
  train: dict
  train_truncated: dict
  test: dict
  summary: ReadSummary
  num_too_small: int


def _held_out(seed: int, comment: Comment, test_fraction: float) -> bool:
  key = f"{seed}\x00{comment.author}\x00{comment.created_utc}\x00{comment.body}"
  digest = hashlib.sha256(key.encode("utf-8")).digest()
  return struct.unpack(">Q", digest[:8])[0] / 2.0**64 < test_fraction


def split_users(comments: Iterable[Comment], *, summary: Optional[ReadSummary] = None,
                tokens_per_user: int = PAPER_TOKENS_PER_USER,
                test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0,
                min_users: int = 1) -> UserSplits:
  """Groups comments by author, holds out random posts, applies the 1,600-token rule.

  Args:
    comments: e.g. `read_comments(paths, summary)`.
    summary: the `ReadSummary` that `comments` fills (kept in the result; a new one if None).
    tokens_per_user: training users need at least this many tokens and keep exactly this
      many (1,600 in paper 001).
    test_fraction: probability that a post is held out for the test set, in [0, 1).
    seed: seeds the held-out hash.
    min_users: the smallest acceptable number of training users.

  Returns:
    The `UserSplits`.

  Raises:
    ValueError: bad arguments, or fewer than `min_users` training users.
  """
  tokens_per_user = _checks.check_positive_int("tokens_per_user", tokens_per_user)
  test_fraction = _checks.check_nonnegative("test_fraction", test_fraction)
  if test_fraction >= 1:
    raise ValueError(f"`test_fraction` must be in [0, 1); got {test_fraction!r}.")
  seed = _checks.check_nonnegative_int("seed", seed)
  min_users = _checks.check_positive_int("min_users", min_users)
  by_author = collections.defaultdict(list)
  for c in comments:
    by_author[c.author].append(c)
  train, truncated, test = {}, {}, {}
  too_small = 0
  for author in sorted(by_author):
    posts = sorted(by_author[author], key=lambda c: (c.created_utc, c.body))
    kept, held = [], []
    for c in posts:
      tokens = tokenize(c.body)
      if tokens:
        (held if _held_out(seed, c, test_fraction) else kept).append(tokens)
    if held:
      test[author] = held
    if sum(len(t) for t in kept) < tokens_per_user:
      too_small += int(bool(kept))
      continue
    out, left = [], tokens_per_user
    for tokens in kept:
      if left == 0:
        break
      out.append(tokens[:left])
      left -= len(out[-1])
    train[author] = out
    truncated[author] = len(out[-1]) < len(kept[len(out) - 1])
  if len(train) < min_users:
    raise ValueError(
        f"Only {len(train)} authors have >= tokens_per_user={tokens_per_user} training "
        f"tokens ({too_small} had fewer), below min_users={min_users}. Pass more "
        "comment files, or lower `min_users` or `tokens_per_user`.")
  return UserSplits(train=train, train_truncated=truncated, test=test,
                    summary=ReadSummary() if summary is None else summary,
                    num_too_small=too_small)


def build_vocab(users: Mapping[str, Sequence[Sequence[str]]],
                vocab_size: int = PAPER_VOCAB_SIZE) -> list[str]:
  """The `vocab_size` most frequent tokens of `users` (ties by word); fewer if fewer exist."""
  vocab_size = _checks.check_positive_int("vocab_size", vocab_size)
  counts = collections.Counter()
  for posts in users.values():
    for tokens in posts:
      counts.update(tokens)
  ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
  return [w for w, _ in ranked[:vocab_size]]


@dataclasses.dataclass(frozen=True)
class TokenIds:
  """The token-id layout (module docstring): pad 0, words 1..V, UNK, BOS, EOS."""
  vocab_size: int

  @property
  def pad(self) -> int:
    return 0

  @property
  def unk(self) -> int:
    return self.vocab_size + 1

  @property
  def bos(self) -> int:
    return self.vocab_size + 2

  @property
  def eos(self) -> int:
    return self.vocab_size + 3

  @property
  def num_classes(self) -> int:
    return self.vocab_size + 4


def token_ids(vocab_size: int = PAPER_VOCAB_SIZE) -> TokenIds:
  return TokenIds(_checks.check_positive_int("vocab_size", vocab_size))


def user_windows(posts: Sequence[Sequence[str]], vocab: Sequence[str], *,
                 last_truncated: bool = False, unroll: int = PAPER_UNROLL,
                 vocab_size: Optional[int] = None) -> np.ndarray:
  """One user's id windows, int64 [num_windows, unroll + 1] (see the module docstring).

  Args:
    posts: the user's posts as token lists, in order.
    vocab: the vocabulary words (ids 1..len(vocab)).
    last_truncated: the last post was cut, so it gets no EOS.
    unroll: the number of (x, y) steps per window.
    vocab_size: V of the id layout (default len(vocab)); at least len(vocab).
  """
  unroll = _checks.check_positive_int("unroll", unroll)
  ids = token_ids(len(vocab) if vocab_size is None else vocab_size)
  if len(vocab) > ids.vocab_size:
    raise ValueError(f"`vocab_size` ({ids.vocab_size}) must be >= len(vocab) "
                     f"({len(vocab)}); pass a larger vocab_size or a shorter vocab.")
  index = {w: i + 1 for i, w in enumerate(vocab)}
  stream = []
  for k, tokens in enumerate(posts):
    stream.append(ids.bos)
    stream.extend(index.get(t, ids.unk) for t in tokens)
    if not (last_truncated and k == len(posts) - 1):
      stream.append(ids.eos)
  if len(stream) < 2:
    return np.zeros((0, unroll + 1), np.int64)
  n = -(-(len(stream) - 1) // unroll)
  padded = np.full(n * unroll + 1, ids.pad, np.int64)
  padded[:len(stream)] = stream
  return np.stack([padded[i * unroll:(i + 1) * unroll + 1] for i in range(n)])


def element_spec(unroll: int = PAPER_UNROLL) -> dict:
  """The `SqlClientData` element spec: {"x", "y"} int64 [unroll]."""
  unroll = _checks.check_positive_int("unroll", unroll)
  return {"x": tf.TensorSpec([unroll], tf.int64), "y": tf.TensorSpec([unroll], tf.int64)}


def make_sql_client_data(splits: UserSplits, vocab: Sequence[str], database_path: str, *,
                         unroll: int = PAPER_UNROLL,
                         vocab_size: Optional[int] = None) -> str:
  """Writes both splits with TFF's `save_to_sql_client_data`; returns `database_path`.

  Written to `<database_path>.tmp` and renamed into place (TFF itself copies a finished
  temporary file); an existing file at `database_path` is replaced.
  """
  database_path = os.fspath(database_path)
  unroll = _checks.check_positive_int("unroll", unroll)
  windows = {}
  for split, users in ((TRAIN, splits.train), (TEST, splits.test)):
    for author, posts in users.items():
      w = user_windows(posts, vocab, unroll=unroll, vocab_size=vocab_size,
                       last_truncated=split == TRAIN and splits.train_truncated[author])
      if len(w):
        windows[(split, author)] = w
  if not windows:
    raise ValueError(f"No user has any tokens to write to {database_path!r}; check the "
                     "input files and `tokens_per_user`.")
  keys = sorted(windows)
  # save_to_sql_client_data keys splits by client id, so the two splits get distinct ids
  # ("train/<author>", "test/<author>"); `load_client_data` strips nothing: ids are opaque.
  client_ids = [f"{s}/{a}" for s, a in keys]
  by_id = dict(zip(client_ids, (windows[k] for k in keys)))

  def dataset_fn(client_id: str) -> tf.data.Dataset:
    w = by_id[client_id]
    return tf.data.Dataset.from_tensor_slices({"x": w[:, :-1], "y": w[:, 1:]})

  tmp = database_path + ".tmp"
  tff.simulation.datasets.save_to_sql_client_data(
      client_ids, dataset_fn, tmp, allow_overwrite=True,
      split_names_by_client_id={c: c.split("/", 1)[0] for c in client_ids})
  # TFF's writer makes no index: without it every client read scans the table.
  sql_client_data.add_client_index(tmp)
  os.replace(tmp, database_path)
  return database_path


def load_client_data(database_path: str, split: str = TRAIN, *,
                     unroll: int = PAPER_UNROLL) -> tff.simulation.datasets.ClientData:
  """The split's `ClientData` of {"x", "y"} windows (TFF's `load_and_parse_sql_client_data`).

  Client ids are "<split>/<author>".
  """
  database_path = os.fspath(database_path)
  if split not in (TRAIN, TEST):
    raise ValueError(f"`split` must be {TRAIN!r} or {TEST!r}; got {split!r}.")
  if not os.path.isfile(database_path):
    raise ValueError(f"`database_path` {database_path!r} is not a file; build it with "
                     "`make_sql_client_data` or `prepare`.")
  return tff.simulation.datasets.load_and_parse_sql_client_data(
      database_path, element_spec(unroll), split_name=split)


def read_split_arrays(database_path: str, split: str = TRAIN, *,
                      unroll: int = PAPER_UNROLL) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Every client of a split of a `make_sql_client_data` database as (x, y) int64 arrays.

  The same examples `load_client_data` yields, read with one SQL query and one batched
  `tf.io.parse_example` instead of one query per client (TFF's per-client `SqlClientData`
  dataset costs ~0.1 s, which dominates a round of small clients). Rows keep their stored
  order (TFF's own reader orders a client's examples by rowid too). Keys: client ids
  ("<split>/<author>"), sorted.
  """
  if split not in (TRAIN, TEST):
    raise ValueError(f"`split` must be {TRAIN!r} or {TEST!r}; got {split!r}.")
  database_path = os.fspath(database_path)
  if not os.path.isfile(database_path):
    raise ValueError(f"`database_path` {database_path!r} is not a file; build it with "
                     "`make_sql_client_data` or `prepare`.")
  spec = element_spec(unroll)
  with contextlib.closing(sqlite3.connect(f"file:{database_path}?mode=ro", uri=True)) as db:
    try:
      rows = db.execute("SELECT client_id, serialized_example_proto FROM examples "
                        "WHERE split_name = ? ORDER BY client_id, rowid", (split,)).fetchall()
    except sqlite3.DatabaseError as e:
      raise ValueError(f"{database_path!r} is not a dp_fl Reddit SqlClientData database "
                       f"({e}); delete it to rebuild the cache.") from e
  if not rows:
    return {}
  try:
    parsed = tf.io.parse_example(
        tf.constant([r[1] for r in rows]),
        {k: tf.io.FixedLenFeature(v.shape, v.dtype) for k, v in spec.items()})
  except (tf.errors.InvalidArgumentError, UnicodeDecodeError) as e:
    reason = (e.message.splitlines()[0] if isinstance(e, tf.errors.OpError) and e.message
              else type(e).__name__)
    raise ValueError(
        f"{database_path!r} holds records that are not {{x, y}} int64 windows of length "
        f"{unroll} ({reason}): it is damaged or was built with another `unroll`; delete it "
        "to rebuild the cache.") from e
  x, y = parsed["x"].numpy(), parsed["y"].numpy()
  ids = np.array([r[0] for r in rows])
  starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
  ends = np.r_[starts[1:], len(ids)]
  return {str(ids[a]): (x[a:b], y[a:b]) for a, b in zip(starts, ends)}


def batch_dataset(dataset: tf.data.Dataset,
                  batch_size: int = PAPER_BATCH_SIZE) -> tf.data.Dataset:
  """(x, y) batches of `batch_size` windows in stored order (last batch may be smaller)."""
  batch_size = _checks.check_positive_int("batch_size", batch_size)
  return dataset.map(lambda e: (e["x"], e["y"])).batch(batch_size)


@dataclasses.dataclass(frozen=True)
class Prepared:
  """What `prepare` returns: the database, the vocabulary and the read summary.

  Attributes:
    database_path, vocab, num_train_users, num_test_users: the cache entry.
    summary: the `ReadSummary` when the files were read by this call; None when the cache
      entry was read back.
    data_quality: the counts of what reading skipped, saved with the cache entry (so also
      when it is read back): `ReadSummary.as_dict()` plus "authors_too_small" (authors left
      out of training for having fewer than `tokens_per_user` tokens).
  """
  database_path: str
  vocab: list
  num_train_users: int
  num_test_users: int
  summary: Optional[ReadSummary]
  data_quality: Mapping = dataclasses.field(default_factory=dict)


# Part of the cache key: bump when what a cache entry holds changes.
_CACHE_VERSION = 3  # 3: the prepared database carries the per-client index.


def _fingerprint(paths: Sequence[str], params: dict) -> str:
  h = hashlib.sha256()
  for p in paths:
    st = os.stat(p)
    h.update(f"{os.path.abspath(p)}\x00{st.st_size}\x00{st.st_mtime_ns}\x00".encode())
  h.update(json.dumps(params, sort_keys=True).encode())
  return h.hexdigest()[:16]


def prepare(paths: Sequence[str] | str, cache_dir: str, *,
            vocab_size: int = PAPER_VOCAB_SIZE,
            tokens_per_user: int = PAPER_TOKENS_PER_USER,
            test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0,
            min_users: int = 1, unroll: int = PAPER_UNROLL,
            max_malformed_fraction: float = DEFAULT_MAX_MALFORMED_FRACTION,
            drop_automoderator: bool = True) -> Prepared:
  """Converts the comment files once to a cached `SqlClientData` database plus vocabulary.

  The cache entry `<cache_dir>/<fingerprint>/` (fingerprint: the files' absolute paths,
  sizes and mtimes and all the arguments) holds `reddit.sqlite` and `vocab.json`, each
  written to a temporary file and renamed; a later call with the same inputs reads them
  back (then `summary` is None; `data_quality`, saved in `vocab.json`, is still there).
  When lines were malformed or comments dropped, one line saying how many (by reason) is
  printed to stderr as the files are read. Arguments as in `read_comments`, `split_users`,
  `build_vocab` and `user_windows`.
  """
  if isinstance(paths, (str, os.PathLike)):
    paths = [paths]
  paths = [os.fspath(p) for p in paths]
  for p in paths:
    if not os.path.isfile(p):
      raise ValueError(f"`paths` entry {p!r} is not a file; pass existing JSON-lines files.")
  params = dict(vocab_size=vocab_size, tokens_per_user=tokens_per_user,
                test_fraction=test_fraction, seed=seed, unroll=unroll,
                max_malformed_fraction=max_malformed_fraction,
                drop_automoderator=drop_automoderator, min_users=min_users,
                cache_version=_CACHE_VERSION)
  directory = os.path.join(os.path.expanduser(os.fspath(cache_dir)),
                           _fingerprint(paths, params))
  db = os.path.join(directory, "reddit.sqlite")
  meta_path = os.path.join(directory, "vocab.json")
  if os.path.isfile(db) and os.path.isfile(meta_path):
    meta = _read_meta(meta_path)
    return Prepared(db, meta["vocab"], meta["num_train_users"], meta["num_test_users"], None,
                    meta["data_quality"])
  summary = ReadSummary()
  comments = read_comments(paths, summary, max_malformed_fraction=max_malformed_fraction,
                           drop_automoderator=drop_automoderator)
  splits = split_users(comments, summary=summary, tokens_per_user=tokens_per_user,
                       test_fraction=test_fraction, seed=seed, min_users=min_users)
  if summary.num_malformed or summary.num_dropped:
    print(f"Reddit data ({len(paths)} file(s)): {summary.num_malformed} malformed line(s) "
          f"skipped {dict(sorted(summary.malformed.items()))}, {summary.num_dropped} "
          f"comment(s) dropped {dict(sorted(summary.dropped.items()))}, of {summary.lines} "
          "lines.", file=sys.stderr)
  quality = {"skipped": summary.num_malformed,  # Task.data_quality's total: bad lines.
             **summary.as_dict(), "authors_too_small": splits.num_too_small}
  vocab = build_vocab(splits.train, vocab_size)
  files.make_cache_dir(directory, "the prepared Reddit data cache",
                       "pass --prepared_cache_dir DIR (a writable directory), or set HOME to "
                       "one")
  make_sql_client_data(splits, vocab, db, unroll=unroll, vocab_size=vocab_size)
  files.atomic_write_json(meta_path, {"vocab": vocab, "num_train_users": len(splits.train),
                                      "num_test_users": len(splits.test),
                                      "data_quality": quality})
  return Prepared(db, vocab, len(splits.train), len(splits.test), summary, quality)


def _read_meta(meta_path: str) -> dict:
  """A cache entry's `vocab.json`, checked; a damaged one is a ValueError with the fix."""
  fix = (f"delete its directory {os.path.dirname(meta_path)!r} to rebuild the cache entry "
         "from the comment files.")
  try:
    with open(meta_path, encoding="utf-8") as f:
      meta = json.load(f)
  except (ValueError, UnicodeDecodeError) as e:
    raise ValueError(f"The prepared-data cache file {meta_path!r} is not valid JSON ({e}); "
                     f"{fix}") from e
  keys = ("vocab", "num_train_users", "num_test_users", "data_quality")
  if not isinstance(meta, dict) or any(k not in meta for k in keys):
    found = sorted(meta) if isinstance(meta, dict) else type(meta).__name__
    raise ValueError(f"The prepared-data cache file {meta_path!r} lacks keys (expected "
                     f"{list(keys)}, found {found}); {fix}")
  return meta
