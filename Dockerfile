# gpu-extender and gpu-agent in one image, for those with a container
# engine. `make image` builds the same file tree with the same script
# (deploy/image/rootfs.sh) and packs it as an OCI archive without any
# engine (deploy/image/oci.sh); that is the image the tests run. Tag this
# one gpu-extender:$(cat VERSION) as well.
FROM debian:bookworm-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential ca-certificates git && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# `make all` first installs the libraries it builds against (BUILD_PKGS in
# the Makefile). The rootfs: the programs (kubectl-gpu too), exactly the shared libraries
# they load, CA certificates, passwd/group (root, nonroot 65532) and /tmp.
RUN make -j"$(nproc)" all && deploy/image/rootfs.sh /rootfs build

FROM scratch
COPY --from=build /rootfs /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpu-extender"]
