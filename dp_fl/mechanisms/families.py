"""Every mechanism family the catalog knows, registered: importing this module imports every
module of `dp_fl.mechanisms`, and each one that registers a family (`catalog.register`, the
README recipe) does so when imported — so `catalog.names()`, `catalog.build` and
`catalog.load_or_build` know them all, for the command-line tools (`scripts/privacy`) as for
training (`dp_fl.training.registry`), without importing the training tier. A new mechanism
module is found here by itself; Bazel's `//dp_fl/mechanisms:added_mechanisms` globs it.
"""

import importlib
import pkgutil

from dp_fl import mechanisms

for _module in sorted(info.name for info in pkgutil.iter_modules(mechanisms.__path__)):
  if _module != "families":
    importlib.import_module(f"{mechanisms.__name__}.{_module}")
