# The leaserun command in an image, in two stages: build on Debian
# bookworm-slim with the -dev packages, meson and ninja; run on
# bookworm-slim with only the runtime libraries, as an unprivileged user.
#
#   docker build -t leaserun .
#   docker run --rm -e LEASERUN_ENDPOINTS=etcd1:2379,etcd2:2379,etcd3:2379 \
#       leaserun worker --concurrency 2
#
# docker-compose.yml runs it against three etcd members.

FROM debian:bookworm-slim AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      gcc libc6-dev pkg-config meson ninja-build \
      libgrpc-dev libprotobuf-c-dev protobuf-c-compiler libjansson-dev \
      libmicrohttpd-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Only the command: the tests need a running etcd and are not built here.
RUN meson setup /build --buildtype=release \
 && ninja -C /build runner/leaserun \
 && /build/runner/leaserun --help >/dev/null

FROM debian:bookworm-slim
# libgrpc29 brings abseil, c-ares, re2 and OpenSSL; libmicrohttpd12 serves
# --metrics and `leaserun web`; ca-certificates is for
# etcd over TLS (--cacert may also name a CA of your own).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc29 libprotobuf-c1 libjansson4 libmicrohttpd12 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 leaserun \
 && useradd --system --uid 10001 --gid leaserun --home-dir /home/leaserun \
      --create-home --shell /usr/sbin/nologin leaserun
COPY --from=build /build/runner/leaserun /usr/local/bin/leaserun
# Steps run as this user too, in its home, with /tmp for their state files.
USER 10001:10001
WORKDIR /home/leaserun
ENTRYPOINT ["leaserun"]
CMD ["--help"]
