# The two commands that set everything up on a fresh machine:
#   make demo   runs the main job on the bundled default model
#   make test   lints, type-checks and runs the test suite (what CI runs)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test test-slow lint demo bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

lint: venv
	$(PY) -m ruff check src tests bench examples
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -q

test-slow: venv
	$(PY) -m pytest -q -m slow

# The Llama example: check it, write seeded random weights, prefill a prompt and
# decode 16 greedy tokens over the KV cache with linnet.torch; prints tokens and timings.
demo: venv
	$(PY) examples/01-llama/demo.py

bench: venv
	$(PY) bench/frontend.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
