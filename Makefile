# The two commands that set everything up on a fresh machine:
#   make demo   runs the main job on the bundled default model
#   make test   lints, type-checks and runs the test suite (what CI runs)
# Every package comes from requirements.lock (`make lock` regenerates it).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
LOCK := requirements.lock
STAMP := $(VENV)/.installed
PIP := $(PY) -m pip --disable-pip-version-check

.PHONY: venv test test-slow triton-server hf4x lint format demo bench lock lock-upgrade clean

venv: $(STAMP)

# Exactly the locked set: --no-deps, so nothing unlocked slips in; `pip check`
# then proves the lock is closed under every package's own requirements.
$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv --clear $(VENV)
	$(PIP) install --quiet --no-deps -r $(LOCK)
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
	$(PIP) check
	touch $(STAMP)

# The lock updated for pyproject.toml's changes (locked packages keep their versions);
# lock-upgrade resolves every package afresh.
lock:
	$(PYTHON) tools/lock.py lock

lock-upgrade:
	$(PYTHON) tools/lock.py lock --upgrade

lint: venv
	$(PY) -m ruff check src tests bench examples tools integrations
	$(PY) -m ruff format --check src tests bench examples tools integrations
	$(PY) -m mypy

format: venv
	$(PY) -m ruff format src tests bench examples tools integrations

# Two workers (CI has 2 cores; most tests are single-threaded Python), each taking
# whole files so a module's fixtures are built once: about 1.8x faster than one.
TEST_WORKERS ?= 2

test: lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-slow: venv
	$(PY) -m pytest -q -m slow

# A real tritonserver (pytriton's, unpacked outside the venv) for the slow Triton tests.
triton-server: venv
	$(PY) tools/triton_server.py prepare

# transformers 4.57.1 (the 4.x line vLLM and SGLang pinned), unpacked outside the venv,
# for the slow tests that load `linnet.hf.export` folders in it.
hf4x: venv
	$(PY) tools/hf4x.py prepare

# The Llama example: check it, write seeded random weights, prefill a prompt and
# decode 16 greedy tokens over the KV cache with linnet.torch; prints tokens and timings.
# Then text in, text out: a model card with a shipped tokenizer, a prompt's completion
# streamed with tokens/s, and one request through the HTTP server on 127.0.0.1.
demo: venv
	$(PY) examples/01-llama/demo.py

bench: venv
	$(PY) bench/frontend.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
