# relaxbench — `make bench` runs the default suite, `make test` runs the tests. Both install first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-fast bench bench-full clean

install: $(STAMP)

# torch first, pinned, so pip takes the local CPU build instead of resolving a CUDA one.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow"

bench: install
	@echo "make bench: the default suite lands with the harness and report issues; until then try:"
	@echo "  $(VENV)/bin/relaxbench generate --target smollm2-135m-instruct --draft ngram --policy exact --prompt 'Write a haiku.'"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
