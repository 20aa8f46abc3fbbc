#!/usr/bin/env bash
# Builds the container image for real and smoke-tests what it contains.
#
# 1. A local base image (deploy/image-base.sh: debootstrap minbase, cached).
# 2. `Dockerfile --target prebuilt` on that base, with a binary built on this
#    host: the image's layout, user, configs and metadata are the ones users
#    get from the default target, which compiles the same binary inside.
# 3. The image's file system, copied out, runs its own binary under chroot as
#    the image's user: `tollgate demo` on a loopback port answers a chat
#    call, `tollgate healthcheck` sees it ready, and a SIGTERM with a call in
#    flight lets that call complete before the process exits 0.
#   usage: deploy/check-image.sh <cache dir> <tollgate binary>
set -euo pipefail
cd "$(dirname "$0")/.."
cache=$1
binary=$2
base=localhost/tollgate-check-base:bookworm
image=localhost/tollgate:check

step() { echo "check-image: $*"; }

step "base image"
timeout 900 deploy/image-base.sh "$cache" "$base"

# Only what the prebuilt target copies, laid out as in the repository, so the
# build reads the same paths (and the same .dockerignore) as a full build.
context=$cache/context
rm -rf "$context"
mkdir -p "$context/deploy" "$context/target/release"
cp Dockerfile .dockerignore tollgate.example.toml "$context/"
cp deploy/tollgate.toml "$context/deploy/"
cp "$binary" "$context/target/release/tollgate"

step "podman build --target prebuilt"
# Docker format: OCI images drop HEALTHCHECK.
timeout 300 podman build --quiet --isolation chroot --format docker --target prebuilt \
  --build-arg RUNTIME_IMAGE="$base" --build-arg RUST_IMAGE="$base" \
  -t "$image" "$context" >/dev/null

inspect() { podman image inspect --format "$1" "$image"; }
[ "$(inspect '{{.Config.User}}')" = "10001:10001" ] || { echo "image user is not 10001:10001" >&2; exit 1; }
[ "$(inspect '{{.Config.StopSignal}}')" = "SIGTERM" ] || { echo "image STOPSIGNAL is not SIGTERM" >&2; exit 1; }
inspect '{{.Config.Healthcheck.Test}}' | grep -q healthcheck || { echo "image has no HEALTHCHECK" >&2; exit 1; }
inspect '{{.Config.Env}}' | grep -q 'TOLLGATE_CONFIG=/etc/tollgate/tollgate.toml' ||
  { echo "image does not set TOLLGATE_CONFIG" >&2; exit 1; }

step "copy the image's file system out"
root=$cache/rootfs
rm -rf "$root"
mkdir -p "$root"
mounted=$(podman image mount "$image")
trap 'podman image unmount "$image" >/dev/null 2>&1 || true' EXIT
cp -a "$mounted/." "$root/"
podman image unmount "$image" >/dev/null
trap - EXIT
# chroot gives no /dev; the binary needs these few nodes.
for node in null:1:3 zero:1:5 random:1:8 urandom:1:9; do
  IFS=: read -r name major minor <<<"$node"
  rm -f "$root/dev/$name"
  mknod -m 0666 "$root/dev/$name" c "$major" "$minor"
done
install -m 0644 deploy/smoke.toml "$root/etc/tollgate/smoke.toml"

in_image() { # in_image <command…>: runs in the image's root as its user, with its env
  timeout 60 chroot --userspec=10001:10001 "$root" /usr/bin/env -i \
    PATH=/usr/local/bin:/usr/bin:/bin HOME=/var/lib/tollgate \
    TOLLGATE_CONFIG=/etc/tollgate/tollgate.toml "$@"
}

step "the image's configs pass check-config"
in_image tollgate check-config /etc/tollgate/tollgate.toml >/dev/null
in_image tollgate check-config /etc/tollgate/tollgate.example.toml >/dev/null

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$cache/smoke.log
step "tollgate demo on 127.0.0.1:$port"
(cd / && exec timeout 120 chroot --userspec=10001:10001 "$root" /usr/bin/env -i \
  PATH=/usr/local/bin:/usr/bin:/bin HOME=/var/lib/tollgate \
  tollgate --config /etc/tollgate/smoke.toml demo --listen "127.0.0.1:$port") >"$log" 2>&1 &
gateway=$!
stop_gateway() { kill "$gateway" 2>/dev/null || true; }
trap stop_gateway EXIT

ready=
for _ in $(seq 1 100); do
  if in_image tollgate healthcheck --url "http://127.0.0.1:$port/readyz" --timeout-ms 500 2>/dev/null; then
    ready=1
    break
  fi
  kill -0 "$gateway" 2>/dev/null || break
  sleep 0.2
done
[ -n "$ready" ] || { echo "the gateway in the image never became ready:" >&2; cat "$log" >&2; exit 1; }
key=$(awk '/API key/ { print $3; exit }' "$log")
[ -n "$key" ] || { echo "no demo key in the gateway's output:" >&2; cat "$log" >&2; exit 1; }

chat() { # chat <route> <output file>: prints the HTTP status
  curl -s -o "$2" -w '%{http_code}' --max-time 30 "http://127.0.0.1:$port/v1/chat/completions" \
    -H "Authorization: Bearer $key" -H "Content-Type: application/json" \
    -d "{\"model\": \"$1\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}]}"
}

step "one chat call"
status=$(chat fast "$cache/chat.json")
[ "$status" = 200 ] || { echo "chat call answered $status:" >&2; cat "$cache/chat.json" "$log" >&2; exit 1; }
grep -q '"choices"' "$cache/chat.json" || { echo "chat answer has no choices" >&2; exit 1; }

step "SIGTERM with a call in flight"
chat slow "$cache/slow.json" >"$cache/slow.status" &
call=$!
# The slow route's upstream answers after 3 s; the signal lands in that wait.
sleep 1
kill -TERM "$gateway"
wait "$call" || true
status=$(cat "$cache/slow.status")
[ "$status" = 200 ] || { echo "the in-flight call answered $status after SIGTERM:" >&2; cat "$cache/slow.json" "$log" >&2; exit 1; }
code=0
wait "$gateway" || code=$?
trap - EXIT
[ "$code" = 0 ] || { echo "the gateway exited $code after SIGTERM:" >&2; tail -n 20 "$log" >&2; exit 1; }
step "ok"
