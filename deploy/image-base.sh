#!/usr/bin/env bash
# Builds the local base image the image check builds on: a Debian minbase
# from the machine's configured apt mirror (read from its apt sources, never
# written down here), imported into podman as $BASE_IMAGE. The root file
# system is cached as a tarball under the cache directory, so only the first
# run pays for debootstrap.
#   usage: deploy/image-base.sh <cache dir> <image name>
set -euo pipefail
cache=$1
image=$2
suite=bookworm
tarball=$cache/base-$suite.tar

if podman image exists "$image"; then
  exit 0
fi

# The first deb822 or one-line source that carries $suite.
mirror() {
  local file
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    awk -v suite="$suite" '
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) found = uri }
      /^$/ { if (found) { print found; exit } uri = "" }
      END { if (found) print found }' "$file" | head -n1
  done
  if [ -f /etc/apt/sources.list ]; then
    awk -v suite="$suite" '$1 == "deb" && $3 == suite { print $2; exit }' /etc/apt/sources.list
  fi
}

if [ ! -s "$tarball" ]; then
  url=$(mirror | head -n1)
  if [ -z "$url" ]; then
    echo "image-base: no apt source for $suite found; cannot build the base image" >&2
    exit 1
  fi
  mkdir -p "$cache"
  root=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$root"' EXIT
  echo "image-base: debootstrap --variant=minbase $suite (first run only)"
  timeout 900 debootstrap --variant=minbase --include=ca-certificates \
    "$suite" "$root" "$url" >"$cache/debootstrap.log" 2>&1 ||
    { tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
  # apt lists and caches would only bloat every layer built on top.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
fi
podman import --quiet "$tarball" "$image" >/dev/null
