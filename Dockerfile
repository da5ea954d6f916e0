# The operator image: the release binary, the shared libraries it loads, CA certificates
# and a non-root user (65532:65532), nothing else: no shell, no package manager.
# build/rootfs.sh assembles that root filesystem; the last stage copies it onto scratch.
#
# On a machine with registry access (docker, podman or buildah):
#   docker build -t REGISTRY/etcd-operator:0.1.0 .
#
# Without registry access (testkit/env/image/build-image.sh, `make image`): the root filesystem
# is assembled on the host by the same script and given as the build context named
# `rootfs`, which replaces the stage of that name; the builder stage is then unused and
# skipped, so no base image is pulled:
#   build/rootfs.sh target/release/etcd-operator /tmp/rootfs
#   buildah build --build-context rootfs=/tmp/rootfs -t localhost/etcd-operator:0.1.0 .

FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p etcd-operator --bin etcd-operator \
    && bash build/rootfs.sh target/release/etcd-operator /rootfs

FROM scratch AS rootfs
COPY --from=build /rootfs/ /

FROM scratch
COPY --from=rootfs / /
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/etcd-operator"]
CMD ["run"]
