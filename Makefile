# cyberos skill supervisor. `make help` lists the targets.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO       ?= go
TAGS     := seccomp
# bin/cyberos is linked statically (libseccomp.a, glibc's libc.a; pure-Go
# user and DNS lookups): libcontainer re-executes it as every sandbox's
# first process, and a static binary skips the dynamic loader each time.
# -buildvcs=auto stamps the commit (`cyberos version`, cyberos_build_info)
# wherever git is there, even under a GOFLAGS=-buildvcs=false.
STATIC   := -buildvcs=auto -tags "$(TAGS) netgo osusergo" -ldflags '-extldflags "-static"'
BIN      := bin/cyberos
CC       ?= gcc
DEMO_STATE ?= /tmp/cyberos-demo-state
# Installed by `make deps` (scripts/install-deps.sh pins the version).
GOLANGCI_LINT ?= $(CURDIR)/.cache/bin/golangci-lint

.PHONY: help deps deps-build build demo first-build-note test test-tools fuzz vm-test bench lint clean install uninstall

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

deps: ## install what the build, the tests and the linter need (deps-build, postgresql for the fleet tests, golangci-lint into .cache/bin); idempotent
	@bash scripts/install-deps.sh

# cyberos-init is built with musl when installed (deps-build installs it):
# glibc's static start-up probes the CPU caches with CPUID at every exec,
# which traps to the hypervisor in a VM. The kernel's headers come after
# musl's own.
INIT_CC ?= $(shell command -v musl-gcc 2>/dev/null || echo $(CC))

deps-build: ## install only what build and demo need (Debian: libseccomp-dev, pkg-config, gcc, libc6-dev, musl-tools, python3, curl); idempotent
	@bash scripts/install-deps.sh build

build: deps-build ## build bin/cyberos (cgo + seccomp, static), bin/cyberos-spawn (the same, the sandbox creation helper), bin/cyberos-init (static, musl when installed, the sandbox's pid 1), bin/cyberos-tool (static, the in-sandbox client)
	CGO_ENABLED=1 $(GO) build $(STATIC) -o $(BIN) ./cmd/cyberos
	CGO_ENABLED=1 $(GO) build $(STATIC) -o bin/cyberos-spawn ./cmd/cyberos-spawn
	$(INIT_CC) -static -O2 -Wall -Wextra -Werror -idirafter /usr/include -idirafter /usr/include/$(shell $(CC) -print-multiarch) -o bin/cyberos-init sandbox-init/cyberos-init.c
	CGO_ENABLED=0 $(GO) build -o bin/cyberos-tool ./cmd/cyberos-tool
	CGO_ENABLED=0 $(GO) build -o examples/notes-go/main examples/notes-go/skill.go

# The first build downloads the Go modules: say so before minutes of
# silence.
first-build-note:
	@test -x $(BIN) || echo "first build: the Go modules are downloaded, a minute or two; later builds take seconds"

demo: first-build-note build ## run the example skills in the sandbox (as root): results, what was enforced, broker refusals, the audit chain
	@bash scripts/demo.sh $(BIN) $(DEMO_STATE)

# RACE_PKGS run again under the race detector (as root, as the rest of
# make test): every package but integration, the black-box suite of built
# binaries, and mcpclient, whose 200 MiB hostile answer outlasts its test's
# deadline under the detector.
RACE_PKGS := ./audit/... ./cgroups/... ./cmd/... ./fleet/... ./internal/... ./memory/... ./packaging/... \
	./policy/... ./scripts/... ./skillclient/... ./telemetry/... ./wire/... \
	./supervisor/ ./supervisor/cli/... ./supervisor/config/... ./supervisor/sandbox/... ./supervisor/spawn/... \
	./supervisor/internal/broker/... ./supervisor/internal/mcpserve/... ./supervisor/internal/seccomp/... \
	./supervisor/internal/daemon/... ./supervisor/internal/tools/... ./client/...

test-tools: ## promtool into .cache/bin, for the tests of /metrics and of the alerting rules (a few minutes the first time); the pinned MCP reference servers into .cache/mcp
	@bash scripts/install-deps.sh promtool
	@bash scripts/mcp-servers.sh

test: deps test-tools lint ## unit + root integration tests (the sandbox and broker suites twice: cold and warm starts), the race detector on RACE_PKGS, and the macOS and FreeBSD builds and vets
	CGO_ENABLED=1 $(GO) test -tags $(TAGS) -count=1 -timeout 20m ./...
	CYBEROS_IT_START=warm CGO_ENABLED=1 $(GO) test -tags $(TAGS) -count=1 -timeout 20m ./integration/
	CGO_ENABLED=1 $(GO) test -race -tags $(TAGS) -count=1 -timeout 20m $(RACE_PKGS)
	GOOS=darwin CGO_ENABLED=0 $(GO) build ./...
	GOOS=darwin CGO_ENABLED=0 $(GO) vet ./...
	@echo "macOS build and vet: ok"
	GOOS=freebsd CGO_ENABLED=0 $(GO) build ./...
	GOOS=freebsd CGO_ENABLED=0 $(GO) vet ./...
	@echo "FreeBSD build and vet: ok"

fuzz: deps ## every go test -fuzz target (frontmatter, paths, profiles, frames, JSON-RPC, audit lines) for a fixed count of executions each (~20 s here; FUZZTIME=60s or =1000000x overrides)
	@bash scripts/fuzz.sh

vm-test: ## the root integration + cgroups tests in a cgroup v2 qemu VM (Debian kernel, KVM if the CPU has it), then the installed unit under systemd there; as root, downloads cached in .cache/vm
	bash scripts/vm/build.sh
	bash scripts/vm/run.sh
	bash scripts/vm/run.sh -systemd

bench: build ## cold start vs unshare/bwrap/runc (and per seccomp profile), audit emit latency, audit vs no-op, broker vs MCP SDK, daemon throughput and RSS, each issue 42 target against its floor (as root); writes bench-out/ and docs/performance.md
	@bash scripts/bench.sh $(BIN)

lint: ## gofmt, go vet and golangci-lint
	@test -x $(GOLANGCI_LINT) || { echo "$(GOLANGCI_LINT) is missing: run make deps" >&2; exit 1; }
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files --others --exclude-standard '*.go' 2>/dev/null)); \
	  if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	CGO_ENABLED=1 $(GO) vet -tags $(TAGS) ./...
	CGO_ENABLED=1 $(GOLANGCI_LINT) run ./...

clean: ## remove build output
	rm -rf bin

PREFIX  ?= /usr/local
DESTDIR ?=
# systemd reads units from $(PREFIX)/lib/systemd/system for PREFIX=/usr/local
# (the administrator's) and PREFIX=/usr (a distribution package's) alike;
# /etc/systemd/system stays free for the administrator's overrides.
UNITDIR ?= $(PREFIX)/lib/systemd/system
# The example config's skills_dir.
SKILLSDIR := /opt/cyberos/skills
SYSTEMD := $(shell [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ] && echo yes)

install: build ## install binaries, systemd unit, example config, seccomp profiles, skills_dir (PREFIX=/usr/local, DESTDIR=)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(UNITDIR) $(DESTDIR)/etc/cyberos/seccomp-profiles $(DESTDIR)$(PREFIX)/share/doc/cyberos
	install -d -m 0755 $(DESTDIR)$(SKILLSDIR)
	install -m 0755 bin/cyberos bin/cyberos-spawn bin/cyberos-init bin/cyberos-tool $(DESTDIR)$(PREFIX)/bin/
	sed 's|/usr/local/|$(PREFIX)/|g' packaging/cyberos-supervisor.service > $(DESTDIR)$(UNITDIR)/cyberos-supervisor.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/cyberos-supervisor.service
	install -m 0644 packaging/config.example.yaml $(DESTDIR)$(PREFIX)/share/doc/cyberos/config.example.yaml
	install -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/cyberos/README.md
	test -e $(DESTDIR)/etc/cyberos/supervisor.yaml || install -m 0644 packaging/config.example.yaml $(DESTDIR)/etc/cyberos/supervisor.yaml
	install -m 0644 seccomp-profiles/*.json $(DESTDIR)/etc/cyberos/seccomp-profiles/
	@if [ -e $(DESTDIR)/etc/systemd/system/cyberos-supervisor.service ]; then \
	  echo "note: $(DESTDIR)/etc/systemd/system/cyberos-supervisor.service (an older install's) overrides $(UNITDIR)/cyberos-supervisor.service: remove it"; fi
ifeq ($(SYSTEMD),yes)
	systemctl daemon-reload
endif

uninstall: ## stop the service and remove what install installed; keeps /etc/cyberos, the state (audit chain) and the skills
ifeq ($(SYSTEMD),yes)
	-systemctl disable --now cyberos-supervisor.service
endif
	rm -f $(DESTDIR)$(PREFIX)/bin/cyberos $(DESTDIR)$(PREFIX)/bin/cyberos-spawn $(DESTDIR)$(PREFIX)/bin/cyberos-init $(DESTDIR)$(PREFIX)/bin/cyberos-tool
	rm -f $(DESTDIR)$(UNITDIR)/cyberos-supervisor.service
	rm -rf $(DESTDIR)$(PREFIX)/share/doc/cyberos
ifeq ($(SYSTEMD),yes)
	systemctl daemon-reload
endif
	@echo "kept: /etc/cyberos (config, signing key, seccomp profiles), /var/lib/cyberos (audit chain, memory), $(SKILLSDIR)"
