"""Exits 0 if the running interpreter has exactly the versions pinned in the given lock files.

Used by scripts/bootstrap.sh on every `./bazelw` call (fast: reads package metadata only), so a
.venv whose packages were removed, upgraded or half-installed is rebuilt. Prints what differs.
"""

import sys
from importlib import metadata


def main(lock_paths: list[str]) -> int:
  problems = []
  for path in lock_paths:
    with open(path) as f:
      for raw in f:
        line = raw.split("#", 1)[0].strip()
        if not line:
          continue
        name, _, pinned = line.partition("==")
        try:
          installed = metadata.version(name)
        except metadata.PackageNotFoundError:
          problems.append(f"{name}=={pinned} is not installed")
          continue
        if installed != pinned:
          problems.append(f"{name} is {installed}, the lock says {pinned}")
  for problem in problems:
    print(f"[bootstrap] .venv: {problem}", file=sys.stderr)
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
