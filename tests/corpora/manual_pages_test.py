"""Manual pages as real-text authors: roff to prose, one author per page, both formats."""

from __future__ import annotations

import gzip
import json
import os
import textwrap

import pytest

from tasks import manual_pages
from tasks import real_text

_PAGE = textwrap.dedent(r'''
    .\" Copyright (C) 1999 Somebody. Permission is granted to copy this page.
    .TH WIDGET 7 2024-01-01 "Linux" "Linux Programmer's Manual"
    .SH NAME
    widget \- a small example of a manual page
    .SH SYNOPSIS
    .nf
    .B #include <widget.h>
    .PP
    .BI "int widget_open(const char *" path ", int " flags );
    .fi
    .SH DESCRIPTION
    The
    .BR widget_open ()
    call opens the widget named by \fIpath\fP and returns a new descriptor for it.
    A widget is \(em as its name says \(em a \*(lqsmall\*(rq device of the
    \fBkernel\fR that nobody has ever seen.
    .PP
    When the widget is busy, the call waits for it\&.
    It never waits longer than one second, and it reports the delay in the log.
    .SS Examples
    .EX
    fd = widget_open("/dev/widget0", 0);
    if (fd == \-1) perror("widget_open");
    .EE
    .TP
    .B WIDGET_FAST
    Open the widget without waiting for it to become ready for the next request.
    .IP \(bu 2
    The descriptor is closed when the process exits, as every other descriptor is.
    .SH SEE ALSO
    .BR open (2),
    .BR close (2)
''').lstrip()


def _write(path, text, compress=True):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  if compress:
    with gzip.open(path, "wt", encoding="utf-8") as f:
      f.write(text)
  else:
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)


def _page(name, sentences):
  body = "\n.PP\n".join(
      f"The {name} page says thing number {i} about the {name} tool in plain words."
      for i in range(sentences))
  return f".TH {name.upper()} 1\n.SH DESCRIPTION\n{body}\n"


@pytest.fixture(name="man_root")
def _man_root(tmp_path):
  root = tmp_path / "man"
  _write(str(root / "man7" / "widget.7.gz"), _PAGE)
  for name in ("alpha", "beta"):
    _write(str(root / "man1" / f"{name}.1.gz"), _page(name, 4))
  _write(str(root / "man1" / "gamma.1"), _page("gamma", 4), compress=False)
  # Not authors: an include of another page, a link to a page, a translation, a stub.
  _write(str(root / "man1" / "alias.1.gz"), ".so man1/alpha.1\n")
  os.symlink(str(root / "man1" / "beta.1.gz"), str(root / "man1" / "beta-link.1.gz"))
  _write(str(root / "fr" / "man1" / "alpha.1.gz"), _page("alpha", 5))
  _write(str(root / "man1" / "short.1.gz"), _page("short", 1))
  return str(root)


def test_roff_becomes_the_pages_prose():
  paragraphs = manual_pages.page_paragraphs(_PAGE)
  text = "\n".join(paragraphs)
  assert paragraphs[0] == "widget - a small example of a manual page"
  assert ("The widget_open() call opens the widget named by path and returns a new "
          "descriptor for it. A widget is - as its name says - a \"small\" device of the "
          "kernel that nobody has ever seen.") in paragraphs
  assert ("When the widget is busy, the call waits for it. It never waits longer than one "
          "second, and it reports the delay in the log.") in paragraphs
  assert ("WIDGET_FAST Open the widget without waiting for it to become ready for the next "
          "request.") in paragraphs
  # Comments, the SYNOPSIS, examples and request names are not prose.
  for absent in ("Copyright", "#include", "widget_open(\"", "perror", ".PP", "\\f", "\\(",
                 "Linux Programmer"):
    assert absent not in text, absent


def test_each_page_is_one_author_grouped_by_section(man_root):
  authors = manual_pages.harvest_manual_pages([man_root])
  assert [(a.name, a.group) for a in authors] == [
      ("alpha.1", "man1"), ("beta.1", "man1"), ("gamma.1", "man1"), ("widget.7", "man7")]
  assert all(len(a.sentences) >= real_text.MIN_SENTENCES for a in authors)
  assert "the alpha page says thing number 0 about the alpha tool in plain words ." in (
      authors[0].sentences)
  assert [a.name for a in manual_pages.harvest_manual_pages([man_root], ["7"])] == ["widget.7"]
  with pytest.raises(ValueError, match="does not exist"):
    manual_pages.harvest_manual_pages([os.path.join(man_root, "nope")])


def test_script_writes_a_manual_page_corpus_the_loaders_read(man_root, tmp_path, capsys):
  from scripts import build_real_text_corpus  # pylint: disable=g-import-not-at-top
  from tasks.reddit import data  # pylint: disable=g-import-not-at-top
  from tasks.stackoverflow import database  # pylint: disable=g-import-not-at-top
  for i in range(30):  # Enough authors for every StackOverflow split.
    _write(os.path.join(man_root, "man8", f"tool{i:02d}.8.gz"), _page(f"tool{i:02d}", 12))
  out = str(tmp_path / "out")
  code = build_real_text_corpus.main(["--source", "manual_pages", "--roots", man_root,
                                      "--out_dir", out, "--format", "json"])
  assert code == 0
  report = json.loads(capsys.readouterr().out)
  assert report["authors"] == 34 and report["packages"] == 3
  database.check_database(out)
  train, heldout, test = database.load_client_data(out)
  assert len(train.client_ids) + len(heldout.client_ids) == 34 and test.client_ids
  comments = list(data.read_comments([os.path.join(out, real_text.REDDIT_FILENAME)],
                                     data.ReadSummary()))
  assert {"alpha-1", "beta-1", "gamma-1", "widget-7", "tool00-8"} <= {c.author
                                                                      for c in comments}
  assert {c.subreddit for c in comments} == {"man1", "man7", "man8"}


@pytest.mark.parametrize("argv, message", [
    (["--source", "manual_pages", "--packages", "numpy"], "--packages='numpy'"),
    (["--sections", "7"], "--source=manual_pages"),
    (["--source", "manual_pages", "--sections", "9z"], "--sections=['9z']"),
])
def test_script_names_the_flag_that_does_not_fit_the_source(argv, message, man_root,
                                                            tmp_path, capsys):
  from scripts import build_real_text_corpus  # pylint: disable=g-import-not-at-top
  code = build_real_text_corpus.main(["--roots", man_root, "--out_dir", str(tmp_path / "o")]
                                     + argv)
  assert code == 2
  assert message in capsys.readouterr().err


def test_script_needs_an_out_dir_for_manual_pages(man_root, capsys):
  from scripts import build_real_text_corpus  # pylint: disable=g-import-not-at-top
  code = build_real_text_corpus.main(["--source", "manual_pages", "--roots", man_root])
  assert code == 2
  assert "needs --out_dir" in capsys.readouterr().err


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
