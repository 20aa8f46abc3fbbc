# Tollgate's container image.
#
#   docker build -t tollgate .                  # compiles in the `build` stage
#   docker run -p 8080:8080 tollgate demo --listen 0.0.0.0:8080
#
# Stages:
#   build         compiles the release binary (RUST_IMAGE)
#   runtime-base  RUNTIME_IMAGE + CA certificates + configs + a non-root user
#   prebuilt      runtime-base + a binary built outside the image (BINARY),
#                 for builders that have one already: `--target prebuilt`
#   runtime       runtime-base + the binary from `build` (the default target)
#
# The base images are build arguments so that a mirror or a local base can be
# used without editing this file; the defaults are the public ones.
ARG RUST_IMAGE=docker.io/library/rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin tollgate \
    && install -D target/release/tollgate /out/tollgate

FROM ${RUNTIME_IMAGE} AS runtime-base
# Upstream calls verify TLS with the binary's built-in roots; the system store
# is for anything else in the image that speaks TLS (and operators' habits).
# Versions follow the base image's release: pinning them would break every
# point release of Debian, so DL3008 is ignored (.hadolint.yaml).
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --no-log-init --uid 10001 --user-group --no-create-home \
        --home-dir /var/lib/tollgate --shell /usr/sbin/nologin tollgate \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/tollgate
COPY deploy/tollgate.toml /etc/tollgate/tollgate.toml
COPY tollgate.example.toml /etc/tollgate/tollgate.example.toml
# The gateway reads this path; compose and Kubernetes mount their own file here.
ENV TOLLGATE_CONFIG=/etc/tollgate/tollgate.toml
# SQLite file and ledger journal (deploy/tollgate.toml); mount a volume here.
WORKDIR /var/lib/tollgate
USER 10001:10001
# 8080: the OpenAI-compatible API; 9091: /metrics, /readyz, /admin/v1.
EXPOSE 8080 9091
# SIGTERM starts the graceful shutdown: stop accepting, let in-flight calls
# finish within server.shutdown_grace_ms, flush the ledger.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["tollgate", "healthcheck"]
ENTRYPOINT ["tollgate"]
CMD ["serve"]

FROM runtime-base AS prebuilt
ARG BINARY=target/release/tollgate
COPY ${BINARY} /usr/local/bin/tollgate

FROM runtime-base AS runtime
COPY --from=build /out/tollgate /usr/local/bin/tollgate
