"""Real-text corpora built offline: the prose of installed Python packages, one author each.

Synthetic corpora (`tasks/*/synthetic.py`) are generated from a model the presets could be
tuned to; users bring real text. This module builds real text that every fresh machine has:
the docstrings and comments of the Python packages installed in the interpreter's
environment (for dp_fl, the pinned `.venv`, so every machine builds the same corpus from the
same lock). The unit of privacy is an **author = one module** (`numpy.linalg._linalg`),
grouped by its top-level package, like a user's posts under a subreddit or a tag.

    harvest(roots) -> [Author]          # prose of every module under `roots`
    write_stackoverflow(authors, dir)   # TFF's StackOverflow SQLite format (train/heldout/test)
    write_reddit(authors, path)         # the Reddit monthly JSON-lines format (.jsonl.gz)
    ensure_stackoverflow_corpus()       # built once from the environment, cached
    ensure_reddit_corpus()

What counts as prose: module, class and function docstrings (`ast`) and comment blocks
(`tokenize`), split into paragraphs; a paragraph is kept if it reads like text (at least
`MIN_WORDS` tokens, at least `MIN_ALPHA_FRACTION` of them words; doctest lines, reST field
markers and code-like lines are dropped), and only if it appears in fewer than
`MAX_COPIES` modules (licence headers and boilerplate are not anybody's own text). Sentences
for StackOverflow are lower-cased and tokenized like TFF's StackOverflow data (words and
punctuation separated by single spaces).

Splits for StackOverflow, as the real data's: `heldout` authors are new authors (a hash of
the module name), `test` holds the last fifth of the sentences of one train author in eight
(later posts of known users). The Reddit file carries every paragraph as a comment; the
Reddit task holds out its own test posts.

`scripts/build_real_text_corpus.py` builds them from the command line; the task binaries use
them with `--corpus=real_text`.
"""

from __future__ import annotations

import ast
import collections
import concurrent.futures
import dataclasses
import gzip
import hashlib
import io
import json
import multiprocessing
import os
import re
import sys
import sysconfig
import time
import tokenize
from importlib import metadata
from typing import Iterable, Iterator, Optional, Sequence

from dp_fl import files

# Bump when the output for the same installed packages changes: part of the cache key.
BUILDER_VERSION = 2
DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "dp_fl", "real_text")
REDDIT_FILENAME = "reddit_comments.jsonl.gz"
SUMMARY_FILENAME = "real_text_corpus.json"

MIN_WORDS = 4
MIN_ALPHA_FRACTION = 0.6
MAX_COPIES = 3  # A paragraph in this many modules or more is boilerplate, not an author's.
MIN_SENTENCE_TOKENS = 3
MAX_SENTENCE_TOKENS = 60
MIN_SENTENCES = 3  # Authors with fewer sentences are left out.
MAX_FILE_BYTES = 2_000_000
HELDOUT_MODULUS = 10  # 1 author in 10 is held out (real StackOverflow: user ids % 10 == 0).
TEST_MODULUS = 8  # 1 train author in 8 contributes its later sentences to `test`.
TEST_FRACTION = 0.2

_START_UTC = 1_420_070_400  # 2015-01-01: the Reddit comments' clock starts here.
_DROPPED_LINE = re.compile(r"^\s*(>>>|\.\.\.|\$ |%|#!|-\*-|pylint:|type:|noqa|fmt:|"
                           r"isort:|pragma|TODO\b|FIXME\b|XXX\b|=+$|-+$|\*+$)")
_FIELD_MARKER = re.compile(r":(param|type|rtype|returns?|raises?|arg|ivar|cvar|var)"
                           r"(\s+[\w.]+)*\s*:")
_ROLE = re.compile(r":[a-z]+:`~?([^`]*)`")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'`])")
_TOKEN = re.compile(r"[a-z0-9_]+(?:'[a-z]+)?|[^\sa-z0-9_]")
_WORD = re.compile(r"^[a-z]+(?:'[a-z]+)?$")


def sentences_of(paragraphs: Iterable[str]) -> tuple[str, ...]:
  """The StackOverflow sentences of paragraphs: tokenized, lower-cased, space-separated."""
  out = []
  for paragraph in paragraphs:
    for sentence in _SENTENCE_END.split(paragraph):
      tokens = _TOKEN.findall(sentence.lower())
      if len(tokens) >= MIN_SENTENCE_TOKENS:
        out.append(" ".join(tokens[:MAX_SENTENCE_TOKENS]))
  return tuple(out)


@dataclasses.dataclass(frozen=True)
class Author:
  """One module's prose: its paragraphs in source order, and their sentences (tokenized
  once, by `harvest`, with `sentences_of`)."""
  name: str  # The dotted module path: the author's id.
  group: str  # The top-level package: the subreddit / tag.
  paragraphs: tuple[str, ...]
  sentences: tuple[str, ...]


def default_roots() -> tuple[str, ...]:
  """The environment's installed packages: the interpreter's purelib and platlib."""
  paths = sysconfig.get_paths()
  return tuple(dict.fromkeys(os.path.realpath(paths[k]) for k in ("purelib", "platlib")))


def environment_fingerprint(roots: Sequence[str], packages: Optional[Sequence[str]]) -> str:
  """A cache key: the builder version, the installed distributions and versions, `packages`."""
  dists = sorted({(d.metadata["Name"] or "", d.version)
                  for d in metadata.distributions(path=list(roots))})
  key = json.dumps({"version": BUILDER_VERSION, "dists": dists,
                    "packages": sorted(packages) if packages else None,
                    "roots": [os.path.basename(r) for r in roots]}, sort_keys=True)
  return hashlib.sha256(key.encode()).hexdigest()[:16]


def _module_files(roots: Sequence[str], packages: Optional[Sequence[str]]
                  ) -> Iterator[tuple[str, str, str]]:
  """(module name, top-level package, path) of every .py file under `roots`, sorted."""
  wanted = set(packages) if packages else None
  seen = set()
  for root in roots:
    if not os.path.isdir(root):
      raise ValueError(f"Real-text source directory {root!r} does not exist; pass existing "
                       "directories of Python packages.")
    for directory, subdirs, names in os.walk(root):
      subdirs[:] = sorted(d for d in subdirs
                          if d != "__pycache__" and not d.endswith((".dist-info", ".egg-info")))
      relative = os.path.relpath(directory, root)
      parts = [] if relative == "." else relative.split(os.sep)
      if parts and wanted is not None and parts[0] not in wanted:
        subdirs[:] = []
        continue
      for name in sorted(names):
        if not name.endswith(".py"):
          continue
        stem = name[:-3]
        module_parts = parts + ([] if stem == "__init__" else [stem])
        if not module_parts or (wanted is not None and module_parts[0] not in wanted):
          continue
        module = ".".join(module_parts)
        if module in seen:
          continue
        seen.add(module)
        yield module, module_parts[0], os.path.join(directory, name)


def _raw_texts(source: str) -> list[tuple[int, str]]:
  """(line, text) of the docstrings and comment blocks of one module, in source order."""
  texts = []
  try:
    tree = ast.parse(source)
  except (SyntaxError, ValueError, RecursionError, MemoryError):
    return texts
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node, clean=True)
      if doc:
        texts.append((getattr(node, "lineno", 0), doc))
  block, block_start, last_line = [], 0, -2
  try:
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
      if token.type != tokenize.COMMENT:
        continue
      line = token.start[0]
      text = token.string.lstrip("#").strip()
      if line != last_line + 1 and block:
        texts.append((block_start, "\n".join(block)))
        block = []
      if not block:
        block_start = line
      block.append(text)
      last_line = line
  except (tokenize.TokenError, IndentationError, SyntaxError):
    pass
  if block:
    texts.append((block_start, "\n".join(block)))
  texts.sort(key=lambda t: t[0])
  return texts


def paragraphs_of(text: str) -> list[str]:
  """The prose paragraphs of one docstring or comment block (whitespace collapsed)."""
  out = []
  for chunk in re.split(r"\n\s*\n", text):
    lines = [line for line in chunk.splitlines() if not _DROPPED_LINE.match(line)]
    paragraph = " ".join(" ".join(lines).split())
    paragraph = _ROLE.sub(r"\1", _FIELD_MARKER.sub(" ", paragraph)).replace("``", "")
    paragraph = " ".join(paragraph.split())
    tokens = _TOKEN.findall(paragraph.lower())
    if len(tokens) < MIN_WORDS:
      continue
    words = sum(1 for t in tokens if _WORD.match(t))
    if words / len(tokens) >= MIN_ALPHA_FRACTION:
      out.append(paragraph)
  return out


def module_paragraphs(path: str) -> list[str]:
  """The prose paragraphs of one source file, in order, each once ([] if unreadable)."""
  try:
    if os.path.getsize(path) > MAX_FILE_BYTES:
      return []
    with open(path, encoding="utf-8", errors="replace") as f:
      source = f.read()
  except OSError:
    return []
  paragraphs = [p for _, text in _raw_texts(source) for p in paragraphs_of(text)]
  return list(dict.fromkeys(paragraphs))


def harvest(roots: Optional[Sequence[str]] = None,
            packages: Optional[Sequence[str]] = None) -> list[Author]:
  """The authors (modules) under `roots` with at least `MIN_SENTENCES` sentences of prose.

  Args:
    roots: directories of Python packages (default: the environment's, `default_roots`).
    packages: only these top-level packages (default: all).

  Returns:
    Authors sorted by module name; each paragraph appears in fewer than `MAX_COPIES`
    modules.
  """
  roots = default_roots() if roots is None else tuple(roots)
  modules = list(_module_files(roots, packages))
  paths = [path for _, _, path in modules]
  workers = min(os.cpu_count() or 1, max(1, len(paths) // 200))
  if workers > 1:  # Parsing ~10,000 files: one process per core (spawned: no forked TF).
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
      texts = list(pool.map(module_paragraphs, paths, chunksize=64))
  else:
    texts = [module_paragraphs(path) for path in paths]
  return authors_of([(module, group, paragraphs)
                     for (module, group, _), paragraphs in zip(modules, texts)])


def authors_of(texts: Sequence[tuple[str, str, Sequence[str]]]) -> list[Author]:
  """Authors from (name, group, paragraphs) of any source, sorted by name: a paragraph found
  in `MAX_COPIES` or more texts is boilerplate and dropped; authors left with fewer than
  `MIN_SENTENCES` sentences are left out."""
  copies = collections.Counter()
  for _, _, paragraphs in texts:
    copies.update(paragraphs)
  authors = []
  for name, group, paragraphs in texts:
    own = tuple(p for p in paragraphs if copies[p] < MAX_COPIES)
    sentences = sentences_of(own)
    if len(sentences) >= MIN_SENTENCES:
      authors.append(Author(name, group, own, sentences))
  return sorted(authors, key=lambda a: a.name)


def _bucket(name: str, modulus: int) -> int:
  return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % modulus


def stackoverflow_splits(authors: Iterable[Author]
                         ) -> dict[str, dict[str, list[str]]]:
  """{split: {client id: sentences}} for train, heldout and test (see the module doc)."""
  splits = {"train": {}, "heldout": {}, "test": {}}
  for author in authors:
    sentences = list(author.sentences)
    if _bucket(author.name, HELDOUT_MODULUS) == 0:
      splits["heldout"][author.name] = sentences
      continue
    if _bucket(author.name, TEST_MODULUS) == 1 and len(sentences) >= 2 * MIN_SENTENCES:
      cut = len(sentences) - max(1, int(len(sentences) * TEST_FRACTION))
      splits["test"][author.name] = sentences[cut:]
      sentences = sentences[:cut]
    splits["train"][author.name] = sentences
  return splits


def write_stackoverflow(authors: Sequence[Author], directory: str,
                        summary: Optional[dict] = None) -> str:
  """Writes `<directory>/stackoverflow.sqlite` (TFF's format); returns its path."""
  from tasks.stackoverflow import database  # pylint: disable=g-import-not-at-top
  groups = {a.name: a.group for a in authors}
  splits = stackoverflow_splits(authors)

  def rows():
    for split, clients in splits.items():
      examples, metadata_rows = [], []
      for client_id, sentences in sorted(clients.items()):
        group = groups[client_id]
        for i, sentence in enumerate(sentences):
          date = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(_START_UTC + 60 * i))
          examples.append((split, client_id, database.make_example(
              sentence, title=client_id, tags=group, creation_date=date)))
        metadata_rows.append((client_id, split, len(sentences)))
      yield split, examples, metadata_rows

  info = dict(summary or {}, builder_version=BUILDER_VERSION, source="real_text",
              num_authors=len(authors))
  return database.write_database(directory, rows(), SUMMARY_FILENAME, info)


def reddit_lines(authors: Sequence[Author]) -> list[str]:
  """The comments as Reddit JSON lines, in `created_utc` order (a paragraph per comment).

  The author is the module with '-' for '.' (Reddit user names are [A-Za-z0-9_-]; no module
  name has a '-', so the mapping is one to one).
  """
  records = []
  for author in authors:
    name = reddit_author(author.name)
    for i, paragraph in enumerate(author.paragraphs):
      # Each author's comments in order, authors interleaved by a hash of the name.
      created = _START_UTC + 600 * i + _bucket(author.name, 600)
      records.append((created, name, author.group, paragraph))
  records.sort()
  return [json.dumps({"author": name, "body": body, "subreddit": group,
                      "created_utc": created, "score": 1}, sort_keys=True)
          for created, name, group, body in records]


def reddit_author(module: str) -> str:
  """The Reddit user name of a module's author: `numpy.linalg` -> `numpy-linalg`."""
  return module.replace(".", "-")


def write_reddit(authors: Sequence[Author], path: str) -> str:
  """Writes the comments of `authors` to `path` (gzip JSON lines, atomically)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with files.atomic_output(path) as raw:
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
      f.write(("\n".join(reddit_lines(authors)) + "\n").encode("utf-8"))
  return os.fspath(path)


def corpus_directory(cache_dir: Optional[str] = None, roots: Optional[Sequence[str]] = None,
                     packages: Optional[Sequence[str]] = None) -> str:
  """`<cache_dir>/<environment fingerprint>`: where the corpora of this environment live."""
  roots = default_roots() if roots is None else tuple(roots)
  root = DEFAULT_CACHE_DIR if cache_dir is None else os.fspath(cache_dir)
  return os.path.join(os.path.abspath(os.path.expanduser(root)),
                      environment_fingerprint(roots, packages))


def write_corpora(authors: Sequence[Author], directory: str,
                  summary: Optional[dict] = None) -> tuple[str, str]:
  """Writes both formats into `directory`: (stackoverflow.sqlite path, Reddit file path).

  The Reddit file is written last, so its presence means both are complete.
  """
  database_path = write_stackoverflow(authors, directory, summary)
  return database_path, write_reddit(authors, os.path.join(directory, REDDIT_FILENAME))


def _ensure(cache_dir: Optional[str], roots: Optional[Sequence[str]],
            packages: Optional[Sequence[str]]) -> str:
  """The corpus directory of this environment, both formats built (from one harvest) on
  first use, under a lock."""
  directory = corpus_directory(cache_dir, roots, packages)

  def build(_):
    print(f"real-text corpus: building {directory} from the installed packages' docstrings "
          "and comments (once; 1-2 minutes on 2 cores)", file=sys.stderr, flush=True)
    write_corpora(harvest(roots, packages), directory, {"packages": packages})

  files.build_once(
      os.path.join(directory, REDDIT_FILENAME), build, "the real-text corpus cache",
      "set HOME to a writable directory (the cache is ~/.cache/dp_fl/real_text), or build the "
      "corpus elsewhere with `scripts/build_real_text_corpus --out_dir DIR` and pass "
      "--data_dir DIR (StackOverflow) or --data_files DIR/reddit_comments.jsonl.gz (Reddit)")
  return directory


def ensure_stackoverflow_corpus(cache_dir: Optional[str] = None,
                                roots: Optional[Sequence[str]] = None,
                                packages: Optional[Sequence[str]] = None) -> str:
  """The directory holding the StackOverflow-format corpus, built on first use."""
  return _ensure(cache_dir, roots, packages)


def ensure_reddit_corpus(cache_dir: Optional[str] = None,
                         roots: Optional[Sequence[str]] = None,
                         packages: Optional[Sequence[str]] = None) -> str:
  """The path of the Reddit-format corpus (JSON lines, gzip), built on first use."""
  return os.path.join(_ensure(cache_dir, roots, packages), REDDIT_FILENAME)
