"""A repository exposing the project's .venv interpreter as Bazel's Python toolchain.

`py_runtime.interpreter_path` must be absolute, and the checkout can live anywhere, so the path
is computed at fetch time from the workspace root. `./bazelw` creates .venv before Bazel runs.
"""

def _venv_python_repository_impl(rctx):
    workspace_root = rctx.path(Label("//:WORKSPACE")).dirname
    interpreter = "%s/.venv/bin/python" % workspace_root
    rctx.file("BUILD", """
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

py_runtime(
    name = "venv_python3",
    interpreter_path = "{interpreter}",
    python_version = "PY3",
    stub_shebang = "#!/usr/bin/env python3",
)

py_runtime_pair(
    name = "venv_runtime_pair",
    py3_runtime = ":venv_python3",
)

toolchain(
    name = "python_toolchain",
    toolchain = ":venv_runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(interpreter = interpreter))

venv_python_repository = repository_rule(
    implementation = _venv_python_repository_impl,
    local = True,
)
