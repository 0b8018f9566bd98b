"""Every mechanism family the catalog knows, registered: importing this module imports each
module that registers one (`catalog.register`) beyond the built-in families, so
`catalog.names()`, `catalog.build` and `catalog.load_or_build` know them all — for the
command-line tools (`scripts/privacy`) as for training, without importing the training tier.
"""

from dp_fl.mechanisms import banded_inverse  # pylint: disable=unused-import
from dp_fl.mechanisms import bsr  # pylint: disable=unused-import
from dp_fl.mechanisms import two_band  # pylint: disable=unused-import
