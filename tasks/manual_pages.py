"""A second kind of offline real text: the prose of the machine's manual pages (roff).

`tasks/real_text.py` builds its corpora from Python packages' docstrings; presets were chosen
on them. A check that a rule was not fitted to that one source needs text from another:
every Debian machine carries manual pages (`/usr/share/man/man<section>/<page>.<section>[.gz]`),
written by other authors, in another register (command and system-call documentation). Here
an **author = one manual page** (`tcp.7`), grouped by its section (`man7`), and its prose is
the filled text of the page:

- comments (`.\\"`), the SYNOPSIS section (command lines, not prose) and no-fill blocks
  (`.nf`/`.fi`, `.EX`/`.EE`: examples, code) are dropped;
- the paragraph macros (`.PP`, `.SH`, `.TP`, `.IP`, ...) end a paragraph; the font macros
  (`.B`, `.BR`, ...) keep their text (alternating fonts joined without a space, as troff
  prints them); any other request is dropped;
- inline escapes (`\\fB`, `\\-`, `\\(em`, `\\*(lq`, `\\s-1`, ...) become their text or nothing.

Pages that only include another (`.so`) and symbolic links to other pages are skipped (they
repeat an author). The paragraphs then pass `real_text.paragraphs_of`'s prose filter and the
same boilerplate rule as module prose (`real_text.authors_of`), so both sources give
`real_text.Author`s and are written by the same writers.

    harvest_manual_pages(roots, sections) -> [Author]
"""

from __future__ import annotations

import gzip
import os
import re
import shlex
from typing import Iterator, Optional, Sequence

from tasks import real_text

DEFAULT_ROOTS = ("/usr/share/man",)
_SECTION_DIR = re.compile(r"^man([0-9a-z]+)$")
_PAGE = re.compile(r"^(?P<page>.+)\.(?P<section>[0-9][0-9a-z]*)(?:\.gz)?$")
_REQUEST = re.compile(r"^[.'][ \t]*(?P<name>[A-Za-z]{1,3})(?:[ \t]+(?P<args>.*))?$")
_BREAKS = {"SH", "SS", "PP", "LP", "P", "TP", "TQ", "IP", "HP", "sp", "br", "RS", "RE",
           "TH", "bp", "ne", "in", "ti", "SY", "YS", "OP", "UR", "UE", "MT", "ME"}
_FONTS = {"B", "I", "SM", "SB"}  # Text in one font: the words keep their spaces.
_ALTERNATING = {"BR", "RB", "BI", "IB", "IR", "RI"}  # Alternating fonts: joined.
_NO_FILL = {"nf": "fi", "EX": "EE"}
_SKIPPED_SECTIONS = {"SYNOPSIS", "SYNTAX"}
_ESCAPES = [
    (re.compile(r"\\\"" r".*$"), ""),  # An inline comment.
    (re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)"), ""),  # Font changes.
    (re.compile(r"\\s[+-]?\d+|\\s\[[^\]]*\]|\\s\([+-]?\d\d"), ""),  # Size changes.
    (re.compile(r"\\\*(?:\[(?:lq|rq)\]|\((?:lq|rq))"), "\""),  # Quotes.
    (re.compile(r"\\\*(?:\[[^\]]*\]|\(..|.)"), ""),  # Other strings.
    (re.compile(r"\\\((?:em|en)|\\\[(?:em|en)\]"), " - "),  # Dashes.
    (re.compile(r"\\\((?:lq|rq|dq)|\\\[(?:lq|rq|dq)\]"), "\""),
    (re.compile(r"\\\((?:oq|cq|aq)|\\\[(?:oq|cq|aq)\]"), "'"),
    (re.compile(r"\\\(..|\\\[[^\]]*\]"), " "),  # Other special characters.
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\[ ~0]"), " "),
    (re.compile(r"\\[&|^%c:)]"), ""),
    (re.compile(r"\\[nkhvwlLxXoAbDHNRSYZ](?:\[[^\]]*\]|\([^)]{0,2}|'[^']*'|.)?"), ""),
    (re.compile(r"\\(.)"), r"\1"),
]


def plain_text(line: str) -> str:
  """One roff text line (or macro argument) with its escapes replaced by their text."""
  for pattern, replacement in _ESCAPES:
    line = pattern.sub(replacement, line)
  return line


def _macro_text(name: str, args: str) -> str:
  try:
    words = shlex.split(args, posix=True)
  except ValueError:  # An unbalanced quote: the words as they are.
    words = args.split()
  words = [plain_text(w) for w in words]
  return "".join(words) if name in _ALTERNATING else " ".join(words)


def page_paragraphs(source: str) -> list[str]:
  """The prose paragraphs of one manual page's roff source, in order, each once."""
  paragraphs, current = [], []
  no_fill_end = None
  skipping_section = False

  def end_paragraph():
    if current and not skipping_section:
      paragraphs.extend(real_text.paragraphs_of(" ".join(current)))
    current.clear()

  for line in source.splitlines():
    if line.startswith((".\\\"", "'\\\"", "\\\"")) or line.strip() in (".", "'"):
      continue
    request = _REQUEST.match(line)
    if no_fill_end is not None:
      if request and request.group("name") == no_fill_end:
        no_fill_end = None
      continue
    if request is None:
      if line.startswith((".", "'")):  # An escape-named request (`.\}`, `.ie \n...`).
        continue
      current.append(plain_text(line))
      continue
    name, args = request.group("name"), request.group("args") or ""
    if name in _NO_FILL:
      end_paragraph()
      no_fill_end = _NO_FILL[name]
    elif name in ("SH", "SS"):
      end_paragraph()
      if name == "SH":
        heading = _macro_text("B", args).strip().upper()
        skipping_section = heading in _SKIPPED_SECTIONS
    elif name in _BREAKS:
      end_paragraph()
      if name == "IP" and args:  # `.IP tag`: the tag begins the paragraph.
        tag = _macro_text("B", args.split(" ")[0] if not args.startswith('"') else args)
        current.append(tag)
    elif name in _FONTS or name in _ALTERNATING:
      text = _macro_text(name, args)
      if text:
        current.append(text)
    # Any other request (.ds, .de, .if, .so, .TH's arguments, ...) carries no prose.
  end_paragraph()
  return list(dict.fromkeys(paragraphs))


def _read_page(path: str) -> Optional[str]:
  try:
    if os.path.getsize(path) > real_text.MAX_FILE_BYTES:
      return None
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
      text = f.read()
  except (OSError, EOFError):
    return None
  first = next((line for line in text.splitlines() if line.strip()), "")
  return None if first.startswith(".so ") else text  # An include of another page.


def _pages(roots: Sequence[str], sections: Optional[Sequence[str]]
           ) -> Iterator[tuple[str, str, str]]:
  """(author name, group, path) of every manual page under `roots`, sorted, each file once."""
  wanted = set(sections) if sections else None
  seen_files, seen_names = set(), set()
  for root in roots:
    if not os.path.isdir(root):
      raise ValueError(f"Manual page directory {root!r} does not exist; pass directories "
                       "holding man<section>/ folders (e.g. /usr/share/man).")
    for directory in sorted(os.listdir(root)):
      match = _SECTION_DIR.match(directory)
      if not match or (wanted is not None and match.group(1) not in wanted):
        continue
      section_dir = os.path.join(root, directory)
      for name in sorted(os.listdir(section_dir)):
        path = os.path.join(section_dir, name)
        page = _PAGE.match(name)
        if page is None or os.path.islink(path) or not os.path.isfile(path):
          continue
        real = os.path.realpath(path)
        # `tcp.7` -> author `tcp.7` (its Reddit name `tcp-7`): characters other than
        # letters, digits and '_' become '_' so that the Reddit mapping stays one to one.
        stem = re.sub(r"[^A-Za-z0-9_]", "_", page.group("page"))
        author = f"{stem}.{page.group('section')}"
        if real in seen_files or author in seen_names:
          continue
        seen_files.add(real)
        seen_names.add(author)
        yield author, directory, path


def harvest_manual_pages(roots: Optional[Sequence[str]] = None,
                         sections: Optional[Sequence[str]] = None
                         ) -> list[real_text.Author]:
  """The authors (manual pages) under `roots` with enough prose (`real_text.authors_of`).

  Args:
    roots: directories holding `man<section>/` folders (default: /usr/share/man; its
      translations in `<lang>/man<section>/` are not read).
    sections: only these sections ("1", "7", ...; default: all).
  """
  roots = DEFAULT_ROOTS if roots is None else tuple(roots)
  texts = []
  for author, group, path in _pages(roots, sections):
    source = _read_page(path)
    texts.append((author, group, page_paragraphs(source) if source is not None else []))
  return real_text.authors_of(texts)
