#!/usr/bin/env bash
# Runs Tollgate's whole test suite (unit, actor and integration tests, the
# CLI against a real database), then the integration suite on PostgreSQL.
# Installs what the tests need when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

install() { # install <debian package> <what it provides>
  echo "installing $1 (provides $2)"
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "$1" >/dev/null
}
need() { # need <command> <debian package>
  command -v "$1" >/dev/null 2>&1 || install "$2" "$1"
}
need cc gcc
need python3 python3
need promtool prometheus
# The tests start their own PostgreSQL (tests/api/support/postgres.rs) from
# Debian's server binaries, which live off PATH in /usr/lib/postgresql/*/bin;
# as root they run it as `nobody` through setpriv.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  install postgresql "initdb, postgres"
fi
need setpriv util-linux
# The semantic cache's shared store is PostgreSQL with pgvector; its tests
# start one from the PyPI wheel `pgserver` (PostgreSQL 16 with pgvector), kept
# where the server's unprivileged user can run it.
if [ "$(id -u)" -eq 0 ]; then pgvector_home=/usr/local/lib/tollgate-test/pgserver; else pgvector_home="$HOME/.cache/tollgate-test/pgserver"; fi
export TOLLGATE_TEST_PGVECTOR_BIN="$pgvector_home/pgserver/pginstall/bin"
if [ ! -x "$TOLLGATE_TEST_PGVECTOR_BIN/postgres" ]; then
  echo "installing pgserver (PostgreSQL with pgvector) into $pgvector_home"
  python3 -m pip install --quiet --no-deps --target "$pgvector_home" pgserver \
    || python3 -m pip install --quiet --no-deps --break-system-packages --target "$pgvector_home" pgserver
  chmod -R a+rX "$pgvector_home"
fi
# The shared-quota tests start their own redis-server on a free loopback port,
# and the Redis Cluster tests six of them, joined with redis-cli.
need redis-server redis-server
need redis-cli redis-tools
# The official Node SDK too, installed into tests/sdk (its package.json).
need node nodejs
need npm npm
if [ ! -d tests/sdk/node_modules/openai ]; then
  echo "installing the openai Node package"
  (cd tests/sdk && npm install --silent --no-audit --no-fund)
fi
# The agents as their users install them, pinned in tests/agents/package.json:
# Claude Code, Codex, the Vercel AI SDK (tests/api/agents.rs runs them).
if [ ! -x tests/agents/node_modules/.bin/claude ] || [ ! -x tests/agents/node_modules/.bin/codex ] \
  || [ ! -d tests/agents/node_modules/ai ]; then
  echo "installing the agents (Claude Code, Codex, the AI SDK) from npm"
  (cd tests/agents && npm install --silent --no-audit --no-fund)
fi
# The official OpenAI and Anthropic SDKs are part of the contract: their
# clients must work unchanged. Pinned, with the OpenAI Agents SDK.
pip_pin() { # pip_pin <import name> <requirement>
  if ! python3 -c "import sys, importlib.metadata as m; sys.exit(m.version('${2%%==*}') != '${2##*==}')" >/dev/null 2>&1; then
    echo "installing $2"
    python3 -m pip install --quiet "$2" || python3 -m pip install --quiet --break-system-packages "$2"
  fi
  python3 -c "import $1" >/dev/null
}
pip_pin openai openai==3.63.0
pip_pin anthropic anthropic==2.17.0
pip_pin agents openai-agents==0.24.0
# The doors' answers are validated against OpenAI's published description with it.
pip_pin jsonschema jsonschema==4.26.0

# The alert rules: each tested rule fires on the series it must and not on the rest.
promtool test rules dashboards/alerts.test.yaml
cargo test --workspace --all-targets
# The integration suite again, every gateway on a fresh PostgreSQL database
# (the production backend) instead of a SQLite file.
TOLLGATE_TEST_DATABASE=postgres cargo test --test api
# And once more with every gateway's quotas on Redis (a real redis-server, one
# database per gateway) instead of in memory: the same budgets and limits must hold.
TOLLGATE_TEST_REDIS=1 cargo test --test api
# The deployment (deploy/): Dockerfile lint, compose and Kubernetes checks,
# the shipped configs, and the container image built and smoke-tested.
deploy/check.sh
