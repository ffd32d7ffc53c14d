# syntax=docker/dockerfile:1
# gavel, remote judges and the CPU local judge: a Rust builder stage and a slim Debian runtime.
#   docker build -t gavel:0.1.0 .
# The binary is built for the generic x86-64/aarch64 target (no target-cpu=native), so the image
# runs on any node of its architecture.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
# Cargo features beyond the defaults, e.g. --build-arg FEATURES=cuda (see Dockerfile.cuda).
ARG FEATURES=""
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin gavel ${FEATURES:+--features "$FEATURES"} \
    && install -m 0755 target/release/gavel /usr/local/bin/gavel

FROM debian:bookworm-slim
# CA roots for HTTPS judges; nothing else.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 gavel \
    && useradd --system --uid 10001 --gid gavel --home-dir /var/lib/gavel --create-home gavel
COPY --from=builder /usr/local/bin/gavel /usr/local/bin/gavel
USER 10001:10001
WORKDIR /var/lib/gavel
ENV GAVEL_ADDR=0.0.0.0:8080 \
    GAVEL_STORE=/var/lib/gavel/store
EXPOSE 8080
ENTRYPOINT ["gavel"]
CMD ["serve"]
