"""scripts/paper004_table3's rows for mechanisms newer than paper 004 (BSR, BISR, BandInvMF) in
Table 3's setting (n = 2052, b = 342, k = 6), next to the paper's BandMF and BLT figures."""

from __future__ import annotations

import pytest

from scripts import paper004_table3


@pytest.fixture(scope="module")
def extra_rows():
  return {row[0]: paper004_table3._row(*row)  # pylint: disable=protected-access
          for row in paper004_table3.EXTRA_ROWS}


def _guaranteed_max_loss(row):
  return row.get("max_loss_guaranteed", row["max_loss"])  # Exact rows have one value.


def test_every_new_mechanism_has_a_row_with_its_memory(extra_rows):
  assert {r["buffers"] for r in extra_rows.values()} == {4, 341}
  for row in extra_rows.values():
    assert row["reproduces"] is None and row["paper_max_loss"] is None
    assert row["rms_loss"] <= row["max_loss"]
    if row["sensitivity_kind"] != "exact":  # Bracketed: the guaranteed losses are shown too.
      assert row["max_loss_guaranteed"] >= row["max_loss"]


def test_the_rows_order_the_mechanisms_as_their_papers_claim(extra_rows):
  # With b bands (341 buffers) BSR is between BandMF (10.21 / 8.60) and the k = 1 BLTs
  # (11.40 / 10.87); BISR is close to it; the optimized BandInvMF beats BISR.
  bsr, bisr = extra_rows["BSR (band=342)"], extra_rows["BISR (band=342)"]
  optimized = extra_rows["BandInvMF* (band=342)"]
  assert 10.21 < bsr["max_loss"] < 11.40 and 8.60 < bsr["rms_loss"] < 10.87
  assert 10.21 < bisr["max_loss"] < 11.40
  assert _guaranteed_max_loss(optimized) < bisr["max_loss"]
  # With 4 buffers the truncated square roots are poor (their prefix sums stop decaying),
  # the optimized banded inverse is within 25 % of a 4-buffer BLT (10.73).
  small = extra_rows["BandInvMF* (band=5)"]
  assert _guaranteed_max_loss(small) < 0.4 * extra_rows["BISR (band=5)"]["max_loss"]
  assert _guaranteed_max_loss(small) < 1.25 * 10.73
  assert extra_rows["BSR (band=5)"]["max_loss"] > 2 * bsr["max_loss"]


def test_the_table_labels_rows_the_paper_lacks(extra_rows):
  text = paper004_table3.format_table(list(extra_rows.values()))
  assert text.count("not in paper 004") == len(extra_rows)
  assert "BandInvMF* (band=5)" in text and "   341 " in text


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
