# tracediff: set up, demo, test, benchmark.
# torch is installed pinned *first*: an open range would pull the newest
# release with GBs of CUDA packages onto a CPU machine.

PYTHON        ?= python3
TORCH_VERSION ?= 2.13.0
VENV          ?= .venv
BIN           := $(VENV)/bin
STAMP         := $(VENV)/.installed-$(TORCH_VERSION)

.PHONY: setup demo test test-fast test-slow lint bench bench-localize clean

setup: $(STAMP)

# pip's and the build backend's chatter goes to $(SETUP_LOG), shown only if a step fails.
SETUP_LOG     := $(VENV)/setup.log
PIP           := $(BIN)/python -m pip install --quiet

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@: > $(SETUP_LOG)
	$(PIP) --upgrade pip >> $(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); exit 1; }
	$(PIP) "torch==$(TORCH_VERSION)" >> $(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); exit 1; }
	$(PIP) -e ".[test]" >> $(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); exit 1; }
	touch $(STAMP)

# The main job on a bundled example: a compile backend that computes sin where
# the script wrote cos. tracediff names the op and line, and exits 1 (divergence).
demo: setup
	cd fixtures && ../$(BIN)/tracediff run wrong_decomposition.py \
	    --backends eager,wrong_decomposition:wrong_cos_backend --out-dir ../.tracediff/demo; \
	    status=$$?; echo "tracediff exit code: $$status (1 = divergence found, as expected)"; test $$status -eq 1

# One pytest worker per core, a test file per worker (module-scoped compiled runs stay shared), the longest
# files first (tests/conftest.py's LONGEST_FIRST; --no-loadscope-reorder keeps that order instead of xdist's
# most-tests-first); the slowest tests are listed at the end (the suite should stay under 12 minutes on 2 cores).
PYTEST        := $(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder --durations=15

test: setup
	$(PYTEST)

# The linter (ruff: pyflakes, import order, bugbear, pyupgrade) and the type checker (mypy), as CI runs them.
lint: setup
	$(BIN)/ruff check tracediff tests bench
	$(BIN)/mypy

test-fast: setup
	$(PYTEST) -m "not slow"

test-slow: setup
	$(PYTEST) -m slow

# The recording-cost workloads include Hugging Face GPT-2 (from a config): transformers comes with .[bench].
# Narrow it with e.g. BENCH_ARGS="--only overhead --workloads hf_gpt2".
BENCH_ARGS    ?=
bench: setup
	$(PIP) -e ".[bench]" >> $(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); exit 1; }
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# Planted faults in compiled graphs of small and library models: is the reported line the faulty one?
# Narrow it with e.g. LOCALIZE_ARGS="--models gpt2 --backends inductor --samples 10".
LOCALIZE_ARGS ?=
bench-localize: setup
	$(PIP) -e ".[bench]" >> $(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); exit 1; }
	$(BIN)/python bench/localize/run.py $(LOCALIZE_ARGS)

clean:
	rm -rf $(VENV) .tracediff .pytest_cache
