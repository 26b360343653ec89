# envoy-injector image: a static (musl) binary on distroless, non-root, no shell.
#
#   docker build -t envoy-injector:dev .        # or: make image
#
# Build stage: the Rust toolchain of Debian bookworm plus musl-tools (ring's C and
# assembly are compiled with musl-gcc). BuildKit cache mounts keep the registry and the
# target directory between builds; the binary is copied out of the cached target.
ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
ARG TARGET=x86_64-unknown-linux-musl
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add "${TARGET}"
WORKDIR /build
# Cargo.toml declares the bench and example targets, so their files must exist for the
# manifest to load, even though only the binary is built.
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
COPY benches ./benches
COPY examples ./examples
ENV CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_TERM_COLOR=never
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/build/target \
    cargo build --release --locked --target "${TARGET}" --bin envoy-injector \
 && cp "target/${TARGET}/release/envoy-injector" /envoy-injector \
 && /envoy-injector --version

# Runtime: distroless static (CA certificates, /etc/passwd with `nonroot`, no shell, no
# package manager). UID/GID 65532 = nonroot; the manifests run it with the same IDs and a
# read-only root filesystem.
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="envoy-injector" \
      org.opencontainers.image.description="Sidecar-injecting admission webhook and Network controller" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /envoy-injector /envoy-injector
USER 65532:65532
# 8443: webhook (HTTPS, POST /mutate). 9090: admin (/healthz, /readyz, /metrics).
EXPOSE 8443 9090
ENTRYPOINT ["/envoy-injector"]
CMD ["serve"]
