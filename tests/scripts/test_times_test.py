"""scripts/test_times: the suite's per-target times against their timeouts."""

from __future__ import annotations

import json
import os

import pytest

from scripts import test_times


def _write_xml(path, seconds, failed=False):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  failure = "<failure message='x'/>" if failed else ""
  with open(path, "w", encoding="utf-8") as f:
    f.write(f"<testsuites><testsuite name='t' tests='1'><testcase name='t' time='{seconds}'>"
            f"{failure}</testcase></testsuite></testsuites>")


_BUILD = """
py_library(
    name = "helper",
    srcs = ["helper.py"],
)

py_test(
    name = "fast_test",
    srcs = ["fast_test.py"],
    size = "small",
)

py_test(
    name = "e2e_test",
    srcs = ["e2e_test.py"],
    size = "large",
    shard_count = 4,
    deps = [":helper"],
)

py_test(
    name = "custom_test",
    srcs = ["custom_test.py"],
    timeout = "long",
)

[py_test(
    name = src[:-len(".py")],
    srcs = [src],
    size = "medium",
) for src in glob(["*_recipe_test.py"])]
"""


def test_every_py_test_is_read_from_the_build_files(tmp_path):
  package = tmp_path / "tests" / "pkg"
  package.mkdir(parents=True)
  (package / "BUILD").write_text(_BUILD)
  for name in ("a_recipe_test.py", "b_recipe_test.py", "fast_test.py"):
    (package / name).write_text("")
  found = {t.label: (t.timeout_s, t.shards) for t in test_times.targets(str(tmp_path))}
  assert found == {"//tests/pkg:fast_test": (60, 1), "//tests/pkg:e2e_test": (900, 4),
                   "//tests/pkg:custom_test": (900, 1), "//tests/pkg:a_recipe_test": (300, 1),
                   "//tests/pkg:b_recipe_test": (300, 1)}


def test_shards_fractions_failures_and_missing_results(tmp_path):
  logs = str(tmp_path)
  targets = [test_times.Target("//tests/a:one_test", 60, 1),
             test_times.Target("//tests/a:sharded_test", 900, 2),
             test_times.Target("//tests/a:missing_test", 300, 1),
             test_times.Target("//tests/a:stale_test", 300, 2)]
  _write_xml(os.path.join(logs, "tests/a/one_test/test.xml"), 12)
  _write_xml(os.path.join(logs, "tests/a/sharded_test/shard_1_of_2/test.xml"), 300)
  _write_xml(os.path.join(logs, "tests/a/sharded_test/shard_2_of_2/test.xml"), 500, failed=True)
  _write_xml(os.path.join(logs, "tests/a/stale_test/test.xml"), 10)  # Before it was sharded.
  summary = test_times.report([test_times.timing(t, logs) for t in targets], 0.5)
  rows = {row["target"]: row for row in summary["rows"]}
  assert rows["//tests/a:one_test"]["fraction_of_timeout"] == 0.2
  assert rows["//tests/a:sharded_test"]["slowest_shard_s"] == 500
  assert rows["//tests/a:sharded_test"]["test_s"] == 800 and rows["//tests/a:sharded_test"]["failed"]
  assert summary["over_max_fraction"] == ["//tests/a:sharded_test"]  # 500 / 900 > 0.5
  assert summary["not_measured"] == ["//tests/a:missing_test", "//tests/a:stale_test"]
  assert summary["test_seconds"] == 812


def test_the_binary_prints_json_and_refuses_a_missing_directory(tmp_path, capsys):
  code = test_times.main(["--testlogs", str(tmp_path), "--format", "json"])
  assert code == 0
  assert json.loads(capsys.readouterr().out)["measured"] == 0
  with pytest.raises(SystemExit):
    test_times.main(["--testlogs", str(tmp_path / "absent")])
  assert "--testlogs=" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    test_times.main(["--testlogs", str(tmp_path), "--max_fraction", "2"])
  assert "--max_fraction=2.0" in capsys.readouterr().err


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
