# gpu-extender and gpu-agent in one image. (Not built in this repository's
# CI: the build machines have no container engine. The test node builds the
# same file tree with the same script, deploy/image/rootfs.sh, and packs it
# as gpu-extender:dev without an engine: test/node/images.sh.)
FROM debian:bookworm-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential ca-certificates git && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# `make all` first installs the libraries it builds against (BUILD_PKGS in
# the Makefile). The rootfs: the two programs, exactly the shared libraries
# they load, CA certificates, passwd/group (root, nonroot 65532) and /tmp.
RUN make -j"$(nproc)" all && deploy/image/rootfs.sh /rootfs build

FROM scratch
COPY --from=build /rootfs /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpu-extender"]
