# envoy-injector — developer entry points. `make help` lists them.
SHELL := /bin/bash
CARGO ?= cargo
BIN := target/debug/envoy-injector
RELEASE_BIN := target/release/envoy-injector

.PHONY: help build test lint demo certs bench bench-engine bench-load clean

help: ## List targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

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

bench: bench-engine bench-load ## Run all benchmarks

bench-engine: ## criterion benchmarks of the injection engine
	$(CARGO) bench --locked --bench engine

bench-load: ## Load test over TLS against the release binary (installs the load generator if missing)
	bash bench/load.sh

clean:
	$(CARGO) clean
