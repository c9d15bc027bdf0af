# gpu-extender and gpu-agent in one image. (Not built in this repository's
# CI: the build machines have no container engine; the same Makefile builds
# the binaries there.)
FROM debian:bookworm-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential libmicrohttpd-dev libcjson-dev libcurl4-openssl-dev libssl-dev libyaml-dev \
      pkg-config ca-certificates git && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make -j"$(nproc)" all

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      libmicrohttpd12 libcjson1 libcurl4 libssl3 libyaml-0-2 ca-certificates pciutils \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/gpu-extender /src/build/gpu-agent /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpu-extender"]
