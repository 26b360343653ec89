# envoy-injector — developer entry points. `make help` lists them.
SHELL := /bin/bash
CARGO ?= cargo
BIN := target/debug/envoy-injector
RELEASE_BIN := target/release/envoy-injector

.PHONY: help build test lint demo certs crd bench bench-engine bench-stores bench-load kind-up e2e kind-down clean

help: ## List targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## Build the binary (debug)
	$(CARGO) build --locked

test: ## Run every test (unit, integration over TLS, manifests); cluster e2e skips without KUBECONFIG
	$(CARGO) test --locked

lint: ## rustfmt check and clippy with warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

demo: ## Start the standalone webhook, post a captured AdmissionReview, show the patch and the Pod
	bash scripts/demo.sh

certs: ## Generate a CA and serving cert for the in-cluster Service into certs/
	$(CARGO) run --locked --quiet -- certs --service envoy-injector --namespace envoy-injector --out-dir certs

crd: ## Regenerate manifests/crd.yaml from the Rust type
	$(CARGO) run --locked --quiet -- crd > manifests/crd.yaml

KIND_CLUSTER ?= envoy-injector
E2E_KUBECONFIG := $(CURDIR)/target/kind-$(KIND_CLUSTER).kubeconfig

kind-up: ## Create the kind cluster for the e2e suite (needs Docker and kind)
	kind create cluster --name $(KIND_CLUSTER) --config tests/e2e/kind.yaml

e2e: ## Cluster e2e against the kind cluster: local `serve` behind a url: webhook (make kind-up first)
	@kind get clusters 2>/dev/null | grep -qx '$(KIND_CLUSTER)' || { echo "no kind cluster '$(KIND_CLUSTER)': run make kind-up" >&2; exit 1; }
	@mkdir -p target
	kind get kubeconfig --name $(KIND_CLUSTER) > $(E2E_KUBECONFIG)
	KUBECONFIG=$(E2E_KUBECONFIG) \
	E2E_WEBHOOK_HOST=$${E2E_WEBHOOK_HOST:-$$(docker network inspect kind -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}' | tr ' ' '\n' | grep -m1 '\.')} \
	E2E_RUN_PODS=$${E2E_RUN_PODS:-1} \
	$(CARGO) test --locked --test e2e -- --nocapture

kind-down: ## Delete the kind cluster
	kind delete cluster --name $(KIND_CLUSTER)

bench: bench-engine bench-stores bench-load ## Run all benchmarks

bench-engine: ## criterion benchmarks of the injection engine
	$(CARGO) bench --locked --bench engine

bench-stores: ## Shared-cache memory with 10k Networks + 10k member Pods, admission latency with full stores
	$(CARGO) bench --locked --bench stores

bench-load: ## Load test over TLS against the release binary (installs the load generator if missing)
	bash bench/load.sh

clean:
	$(CARGO) clean
