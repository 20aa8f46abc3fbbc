#!/usr/bin/env bash
# Runs Tollgate's whole test suite (unit, actor and integration tests, the
# CLI against a real database). Installs what the tests need when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { # need <command> <debian package>
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "installing $2 (provides $1)"
    if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
    $sudo apt-get update -qq && $sudo apt-get install -y -qq "$2" >/dev/null
  fi
}
need cc gcc
need python3 python3
need promtool prometheus
# The official OpenAI SDK is part of the contract: any OpenAI client must work unchanged.
if ! python3 -c "import openai" >/dev/null 2>&1; then
  echo "installing the openai Python package"
  python3 -m pip install --quiet openai || python3 -m pip install --quiet --break-system-packages openai
fi

cargo test --workspace --all-targets
