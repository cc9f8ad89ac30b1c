# rmqspec: every target bootstraps .venv from nothing (Python 3.11 and OpenJDK 17 on the machine).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export PYTHONHASHSEED ?= 0

.PHONY: constraints venv browser faketime conform conform-real conform-matrix results test lint typecheck rules crosshair pytest docs bench mutmut clean rocketmq

venv: $(STAMP)

# Versions come from constraints.txt (every package, pinned), so two fresh installs on different days agree.
$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (rmqspec needs Python 3.11)"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[spark,dev]'
	touch $(STAMP)

# After a change of pyproject.toml's dependencies: a fresh venv at the newest versions pyproject allows,
# frozen into constraints.txt (commit it, after make test passes on it).
constraints:
	rm -rf .venv-constraints && $(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install --quiet --upgrade pip
	.venv-constraints/bin/python -m pip install --quiet -e '.[spark,dev]'
	{ sed -n '1,3p' constraints.txt; .venv-constraints/bin/pip freeze --all --exclude-editable | grep -v '^rmqspec'; } > constraints.new
	mv constraints.new constraints.txt && rm -rf .venv-constraints

# The main job: the full conformance run on the embedded default target.
conform: $(STAMP)
	$(BIN)/rmqspec conform --target reference
	$(BIN)/rmqspec mutants
	$(BIN)/rmqspec conform --target served --profile profiles/short-levels.yaml --workload-seconds 20
	$(BIN)/rmqspec rules

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy -p rmqspec
	$(BIN)/mypy tests benchmarks docs/hooks tools

rules: $(STAMP)
	$(BIN)/rmqspec rules --check

crosshair: $(STAMP)
	$(BIN)/python -m rmqspec.contracts_check

# The site's browser tests need headless Chromium (Debian's package): installed here when it is missing
# and this is a Debian machine run as root (CI is); elsewhere those tests skip, or fail under CI=true.
browser:
	@command -v chromium >/dev/null 2>&1 || test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: headless Chromium not found and cannot be installed here (apt-get install chromium)"; fi; }

# A real broker whose clock the suite steps (the clock-skew scenarios) runs under libfaketime (Debian's
# package): installed here when it is missing on a Debian machine run as root; elsewhere those scenarios
# skip, saying so (adapters/apache/clock.py).
faketime: $(STAMP)
	@$(BIN)/python -c 'from rmqspec.adapters.apache.clock import libfaketime as f; raise SystemExit(f() is None)' || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's libfaketime for the clock-skew scenarios on real brokers"; \
	    { apt-get install -y -qq libfaketime >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfaketime >/dev/null; }; }; \
	  else echo "note: libfaketime not found and cannot be installed here (apt-get install libfaketime)"; fi; }

# Mermaid for the site's diagrams, from the npm registry at the version package-lock.json pins: the site
# serves it itself, so its diagrams render offline (docs/hooks/diagrams.py).
SITE_ASSETS := node_modules/mermaid/dist/mermaid.min.js
$(SITE_ASSETS): package.json package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "error: npm not found (Node.js is needed for the site's Mermaid)"; exit 2; }
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $(SITE_ASSETS)

# The tests start real brokers and the 5.x proxy: their jars are fetched first (rocketmq), so no test
# depends on a cache an earlier run left on the machine.
pytest: $(STAMP) browser rocketmq $(SITE_ASSETS)
	$(BIN)/python -m pytest

docs: $(STAMP) $(SITE_ASSETS)
	$(BIN)/mkdocs build --strict --site-dir site

test: lint typecheck rules crosshair pytest docs conform-real

# Apache RocketMQ, every pinned version (rmqspec broker versions): the brokers' jars from Maven Central into
# ~/.cache/rmqspec (or $$RMQSPEC_CACHE); offline once there. Needs Maven (apt-get install maven).
rocketmq: $(STAMP) faketime
	$(BIN)/rmqspec broker fetch $(foreach v,$(REAL_VERSIONS),--version $(v))

# The whole suite on every pinned Apache RocketMQ version, each started by rmqspec with the short-levels
# profile and stopped after; reports in out/results/ (docs/results/ is made from them by `make results`).
REAL_VERSIONS ?= 4.9.7 5.5.0
REAL_PROFILE  ?= profiles/short-levels.yaml
REAL_PROFILE_5 ?= profiles/short-levels-5.yaml
REAL_WORKLOAD ?= 60
JAVA_WORKLOAD ?= 20
conform-real: rocketmq
	@mkdir -p out/results out/failures
	@status=0; for v in $(REAL_VERSIONS); do \
	  echo "== apache:$$v"; profile=$(REAL_PROFILE); case $$v in 5.*) profile=$(REAL_PROFILE_5);; esac; \
	  $(BIN)/rmqspec conform --target apache:$$v --profile $$profile --workload-seconds $(REAL_WORKLOAD) \
	    --report out/results/apache-$$v.json --junit out/results/apache-$$v.xml --save-dir out/failures/apache-$$v \
	    --plots out/results/plots/apache-$$v \
	    || status=$$?; \
	  echo "== apache:$$v, the workload by Apache's own Java client"; \
	  $(BIN)/rmqspec java-workload --target apache:$$v --seconds $(JAVA_WORKLOAD) \
	    --save out/failures/java-client-$$v.jsonl --report out/results/java-client-$$v.json || status=$$?; \
	done; \
	echo "== apache-proxy:5.5.0 (gRPC)"; \
	$(BIN)/rmqspec conform --target apache-proxy:5.5.0 --profile $(REAL_PROFILE_5) \
	  --report out/results/apache-proxy-5.5.0.json --junit out/results/apache-proxy-5.5.0.xml || status=$$?; \
	exit $$status

# The release matrix (not part of `make test`: a broker per pinned release, about an hour): the scenarios
# whose expected answer changes across releases plus a smoke set, on every pinned release (or MATRIX=...),
# one broker at a time; writes docs/results/matrix.json and docs/release-matrix.md (the site's page).
MATRIX ?=
conform-matrix: $(STAMP) faketime
	$(BIN)/rmqspec matrix $(foreach v,$(MATRIX),--release $(v))

# The latest real-broker reports (out/results/, from make conform-real) become the site's results.
results:
	@ls out/results/*.json >/dev/null 2>&1 || { echo "no reports in out/results/: run make conform-real first"; exit 2; }
	cp out/results/*.json docs/results/
	@if [ -d out/results/plots ]; then mkdir -p docs/results/plots && cp -r out/results/plots/. docs/results/plots/; fi

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# Mutation testing of the reference model (mutmut 3, in a scratch copy under /tmp; see docs/mutation.md).
mutmut: $(STAMP)
	$(BIN)/python tools/mutation.py

clean:
	rm -rf $(VENV) site build *.egg-info .mypy_cache .ruff_cache
