# One entry point for every task. See README.md.
.PHONY: up down test unit e2e bench crd manifests image image-figures fmt lint

up:      ## local control plane + node + operator + example cluster, waits until Ready
	bash testkit/env/local-up.sh
down:    ## stop everything `make up` started and remove its files
	bash testkit/env/local-down.sh
test:    ## everything CI runs: fmt, clippy, unit/actor/real-etcd tests, end-to-end tests
	bash testkit/env/test.sh
unit:    ## tests that need no control plane
	cargo test --workspace
e2e:     ## end-to-end tests against the local environment (brings it up)
	E2E_ONLY=1 bash testkit/env/test.sh
bench:   ## criterion benchmarks, the end-to-end timing scripts (one cluster, a fleet), backup and restore against etcd's own tools
	cargo bench --bench decision --bench cluster_actors
	bash benches/timings.sh
	bash benches/fleet.sh
	bash benches/backup_restore.sh
crd:     ## regenerate the CRD (manifests/10-crd.yaml, charts/etcd-operator/crds/) from the Rust types
	bash testkit/env/chart.sh crd
manifests: ## regenerate manifests/: the CRD from the Rust types, the rest rendered from charts/etcd-operator
	bash testkit/env/chart.sh manifests
image:   ## the operator image with buildah, exported to ~/.cache/etcd-operator/images/
	bash testkit/env/image/build-image.sh
image-figures: ## image sizes, and the operator's idle RSS in it (brings the local environment up)
	bash testkit/env/image-figures.sh --rss
fmt:
	cargo fmt --all
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
