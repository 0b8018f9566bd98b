#!/usr/bin/env bash
# Sets up what dp_fl needs on a fresh machine; idempotent and fast when nothing changed.
#
#   1. Bazel: Debian's `bazel-bootstrap` (4.2.3, works offline) if no `bazel` is on PATH.
#   2. The pinned Python environment in .venv/, from requirements.lock (exact versions, installed
#      with --no-deps) plus requirements-nodeps.lock (TFF 0.87.0, whose own jaxlib pin cannot be
#      installed). A stamp file records the hash of both lock files; a missing, partial (stamp
#      absent: install interrupted), out-of-date or damaged (an installed version differs from the
#      lock: scripts/venv_matches_lock.py) .venv is rebuilt from scratch.
#   3. A health check: imports tensorflow_federated and runs one federated computation.
#
# Environment: DP_FL_PYTHON picks the interpreter used to create .venv (default: python3.11, then
# python3; it must be Python 3.11). Output goes to stderr so `./bazelw ... | cmd` stays clean.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.dp_fl_stamp"

log() { echo "[bootstrap] $*" >&2; }
die() { echo "[bootstrap] ERROR: $*" >&2; exit 1; }

ensure_bazel() {
  if command -v bazel >/dev/null 2>&1; then return; fi
  log "bazel not found; installing Debian's bazel-bootstrap (needs root and the Debian registry)"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "bazel is missing and this user is not root; install the Debian package 'bazel-bootstrap' (Bazel 4.2.3) and rerun."
    sudo="sudo"
  fi
  $sudo apt-get update -qq >&2 || die "'apt-get update' failed; check access to the Debian package registry."
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq bazel-bootstrap >&2 \
    || die "could not install the Debian package 'bazel-bootstrap'; install it by hand and rerun."
  command -v bazel >/dev/null 2>&1 || die "bazel-bootstrap installed but no 'bazel' on PATH."
}

pick_python() {
  local candidates=("${DP_FL_PYTHON:-}" python3.11 python3)
  for py in "${candidates[@]}"; do
    [ -n "$py" ] || continue
    if command -v "$py" >/dev/null 2>&1 && \
       "$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
      command -v "$py"; return
    fi
  done
  die "dp_fl needs Python 3.11 (TensorFlow 2.14 / TFF 0.87). Install it or set DP_FL_PYTHON=/path/to/python3.11."
}

# DP_FL_GPU=1 adds requirements-gpu.lock (CUDA libraries for TensorFlow 2.14.1; docs/GPU.md).
gpu_locks() {
  if [ "${DP_FL_GPU:-0}" = "1" ]; then echo "$root/requirements-gpu.lock"; fi
}

lock_hash() {
  cat "$root/requirements.lock" "$root/requirements-nodeps.lock" $(gpu_locks) \
    | sha256sum | cut -d' ' -f1
}

venv_ok() {
  [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(lock_hash)" ] \
    && "$venv/bin/python" "$root/scripts/venv_matches_lock.py" \
         "$root/requirements.lock" "$root/requirements-nodeps.lock"
}

# Installs the packages of one lock file with --no-deps; on failure names the package.
install_lock() {
  local lock="$1" logfile="$venv/.install.log"
  if ! "$venv/bin/python" -m pip install --no-deps --disable-pip-version-check -q -r "$lock" >>"$logfile" 2>&1; then
    tail -n 20 "$logfile" >&2
    log "bulk install from $(basename "$lock") failed; retrying package by package to name the culprit"
    local line
    while IFS= read -r line; do
      line="${line%%#*}"; line="$(echo "$line" | tr -d '[:space:]')"
      [ -n "$line" ] || continue
      "$venv/bin/python" -m pip install --no-deps --disable-pip-version-check -q "$line" >>"$logfile" 2>&1 \
        || die "could not install '$line' (from $(basename "$lock")). Check that the package registry is reachable and serves this exact version; if the version was withdrawn, update $(basename "$lock") and rerun."
    done < "$lock"
  fi
}

build_venv() {
  local py; py="$(pick_python)"
  log "creating .venv with $py from requirements.lock (first run: a few minutes)"
  rm -rf "$venv"
  "$py" -m venv "$venv" || die "'$py -m venv' failed; install the venv module for Python 3.11 (Debian: python3.11-venv)."
  install_lock "$root/requirements.lock"
  install_lock "$root/requirements-nodeps.lock"
  local gpu_lock
  for gpu_lock in $(gpu_locks); do
    log "DP_FL_GPU=1: installing the CUDA libraries of $(basename "$gpu_lock") (several GB)"
    install_lock "$gpu_lock"
  done
  health_check || die "the new .venv fails its health check (above); see README 'Troubleshooting'."
  lock_hash > "$stamp"
  log ".venv ready"
}

health_check() {
  (cd "$root" && "$venv/bin/python" -m scripts.env_check --quiet) >&2
}

ensure_bazel
if ! venv_ok; then
  if [ -d "$venv" ]; then log ".venv is missing, partial or out of date with the lock files: rebuilding"; fi
  build_venv
fi
