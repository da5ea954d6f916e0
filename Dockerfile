# Builds the operator image: `docker build -t etcd-operator:0.1.0 .`
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p etcd-operator --bin etcd-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/etcd-operator /usr/local/bin/etcd-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/etcd-operator"]
CMD ["run"]
