"""A StackOverflow database of the paper's size, in TFF's format, without the download.

Paper 004's Table 3 (`--preset=paper_table3`) trains on TFF's StackOverflow data
(`tff.simulation.datasets.stackoverflow.load_data`): per TFF's documentation, train has
342,477 clients with 135,818,730 sentences, heldout 38,758 clients with 16,491,230, test
204,088 clients with 16,586,035 (test: new posts of train users). Nothing at that scale can
be tested without the data, so `config_for_scale(scale)` is a `synthetic.SyntheticConfig`
with those client counts times `scale` and per-client sizes drawn to match those means, and
`scripts/make_paper_database` writes it (chunked: memory stays flat at any scale).

**What is real and what is assumed.** Real: the schema, the record format, the split
structure (held-out users are new users, test users are train users), the client counts
and the mean sentences per client of each split. Assumed: the shape of the per-client size
distribution, which TFF does not publish: log-normal with `sigma` (default
`DEFAULT_SIZE_SIGMA` = 1.5, a heavy tail: at the train mean of 397 the median client has
129 sentences, 9 % of clients more than 1,000 and the mean of min(size, 256) — the
paper's cap — is 142), capped at `MAX_SENTENCES`; its median is
solved so that the capped mean is the split's real mean (heldout uses train's: 397 against
its real 425). The words are the synthetic generator's (a learnable Markov language), so
accuracy figures on this file say nothing about real StackOverflow; its sizes, read costs
and memory do.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from dp_fl import root_finding
from tasks.stackoverflow import synthetic

# TFF's StackOverflow splits: (clients, sentences).
TRAIN = (342_477, 135_818_730)
HELDOUT = (38_758, 16_491_230)
TEST = (204_088, 16_586_035)
DEFAULT_SIZE_SIGMA = 1.5
MAX_SENTENCES = 100_000
# The smallest scale that leaves every split a client.
MIN_SCALE = 1.0 / HELDOUT[0]


def _normal_cdf(x: float) -> float:
  return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def capped_lognormal_mean(median: float, sigma: float, cap: float) -> float:
  """E[min(X, cap)] for X = median · exp(sigma · Z), Z standard normal."""
  if sigma == 0:
    return min(median, cap)
  log_ratio = math.log(cap / median)
  below = median * math.exp(sigma ** 2 / 2) * _normal_cdf((log_ratio - sigma ** 2) / sigma)
  return below + cap * (1.0 - _normal_cdf(log_ratio / sigma))


def median_for_mean(mean: float, sigma: float, cap: float = MAX_SENTENCES) -> float:
  """The log-normal median whose capped mean is `mean` (Brent's method; the capped mean
  increases with the median)."""
  if not 1.0 <= mean < cap:
    raise ValueError(f"A mean of {mean} sentences per client must be in [1, {cap}).")
  return root_finding.brent(lambda m: capped_lognormal_mean(m, sigma, cap) - mean,
                            1e-6 * mean, mean, xtol=1e-9, rtol=1e-12)


def _clients(count: int, scale: float) -> int:
  return max(1, round(count * scale))


def config_for_scale(scale: float, sigma: float = DEFAULT_SIZE_SIGMA,
                     seed: int = 0) -> synthetic.SyntheticConfig:
  """The generator config of a copy of TFF's StackOverflow at `scale` (1.0: full size).

  Raises:
    ValueError: naming `scale` or `sigma` when out of range.
  """
  if (isinstance(scale, bool) or not isinstance(scale, (int, float))
      or not MIN_SCALE <= scale <= 1.0):
    raise ValueError(f"`scale` must be in [{MIN_SCALE:.3g}, 1] (1.0 is TFF's full "
                     f"StackOverflow, {MIN_SCALE:.3g} leaves heldout one client); got "
                     f"{scale!r}.")
  if (isinstance(sigma, bool) or not isinstance(sigma, (int, float))
      or not 0 <= sigma <= 4):
    raise ValueError(f"`sigma` (the log-normal spread of sentences per client) must be in "
                     f"[0, 4]; got {sigma!r}.")
  return synthetic.SyntheticConfig(
      seed=seed,
      num_train_clients=_clients(TRAIN[0], scale),
      num_heldout_clients=_clients(HELDOUT[0], scale),
      num_test_clients=_clients(TEST[0], scale),
      sentences_per_client_median=median_for_mean(TRAIN[1] / TRAIN[0], sigma),
      test_sentences_per_client_median=median_for_mean(TEST[1] / TEST[0], sigma),
      sentences_per_client_sigma=float(sigma),
      max_sentences_per_client=MAX_SENTENCES)


@dataclasses.dataclass(frozen=True)
class SizeEstimate:
  """What a copy at some scale holds (expected counts) and roughly costs to write."""
  clients: dict[str, int]
  sentences: dict[str, int]
  bytes: int
  seconds: Optional[float]


# Measured on the 2-core development machine (docs/BENCHMARKS.md, "Paper scale"): bytes per
# sentence of the written file (record + its share of the index) and sentences per second.
BYTES_PER_SENTENCE = 335
SENTENCES_PER_SECOND = 40_000


def estimate(config: synthetic.SyntheticConfig) -> SizeEstimate:
  """Expected clients, sentences, file size and generation time of `config`."""
  mean = capped_lognormal_mean(config.sentences_per_client_median,
                               config.sentences_per_client_sigma,
                               config.max_sentences_per_client)
  test_median = (config.test_sentences_per_client_median
                 or config.sentences_per_client_median)
  test_mean = capped_lognormal_mean(test_median, config.sentences_per_client_sigma,
                                    config.max_sentences_per_client)
  clients = {"train": config.num_train_clients, "heldout": config.num_heldout_clients,
             "test": config.num_test_clients}
  sentences = {"train": round(mean * clients["train"]),
               "heldout": round(mean * clients["heldout"]),
               "test": round(test_mean * clients["test"])}
  total = sum(sentences.values())
  return SizeEstimate(clients, sentences, total * BYTES_PER_SENTENCE,
                      total / SENTENCES_PER_SECOND)
