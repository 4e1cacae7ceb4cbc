# Two commands set everything up on a fresh machine:
#   make demo   - create .venv, install raytf (CPU extra), train the main example on 2 workers
#   make test   - same set-up, then the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.raytf-installed
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast test-unit bench lint dist docs docs-serve clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[cpu,test]'
	@# "raytf" is this project's old distribution name, and PyPI's other project's
	$(BIN)/python -m pip uninstall --quiet --yes raytf 2>/dev/null || true
	touch $(STAMP)

setup: $(STAMP)

# An embedded local Ray instance, 2 workers, live progress and a JSON summary, then the
# run's status and a plot of it (RUN_DIR/plot.png).
DEMO_STORAGE ?= $(HOME)/raytf_results
demo: setup
	@name=demo_$$(date +%Y%m%d_%H%M%S); set -e; \
	$(BIN)/python jobs/train_synthetic.py --workers 2 --steps 256 --checkpoint-every 64 \
		--storage $(DEMO_STORAGE) --name $$name; \
	$(BIN)/raytf status $(DEMO_STORAGE)/$$name; \
	$(BIN)/raytf plot $(DEMO_STORAGE)/$$name

# Lint first (seconds), then every tier: unit, integration, slow fault/multi-node.
test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# raytf vs hand-launched MWMS vs Ray Train, side by side; writes docs/benchmarks.md (~40 min).
bench: setup
	$(BIN)/python jobs/benchmark.py --out docs/benchmarks.md

test-unit: setup
	$(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

# The edit-test loop (under 5 min on 2 cores): the unit tier, then one real-cluster run of
# each concern: a training loop, errors, hangs, observability, a Keras fit killed and
# resumed, kept processes, tf_keras with raytf's callback. Everything else: make test.
FAST_TESTS ?= tests/unit tests/integration/test_train.py tests/integration/test_errors.py \
	tests/integration/test_liveness.py tests/integration/test_observability.py \
	tests/integration/test_keras_recovery.py tests/integration/test_kept.py \
	tests/integration/test_keras.py::test_tf_keras_fit_with_raytf_callback
test-fast: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(FAST_TESTS) $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# What a cluster installs raytf from without any package index (PyPI's "raytf" is another
# project; this one's distribution is raytf-mwms): the wheel, and the committed checkout as
# one zip with one top-level folder, as Ray's runtime_env working_dir takes it (KubeRay).
# Not the wheel in a job's py_modules: Ray pip-installs its dependencies from an index
# there; give py_modules the raytf/ directory (README, "Clusters").
dist: setup
	rm -rf dist && $(BIN)/python -m pip wheel --quiet --no-deps -w dist .
	git archive --format=zip --prefix=raytf/ -o dist/raytf.zip HEAD

# The documentation site (mkdocs.yml, docs/): built strictly (a broken link or a missing
# reference fails), into site/, from a venv of its own holding the docs extra's packages
# alone (no raytf, Ray or TensorFlow: seconds to set up; the hook reads raytf's source).
DOCS_VENV ?= .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.raytf-docs-installed
$(DOCS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(DOCS_VENV)
	@# The docs extra's requirements, read from pyproject.toml (any Python 3: no tomllib)
	$(DOCS_VENV)/bin/python -m pip install --quiet $$($(PYTHON) -c "import re; \
		line = re.search(r'^docs = \[(.*)\]', open('pyproject.toml').read(), re.M).group(1); \
		print(' '.join(re.findall(r'\"([^\"]+)\"', line)))")
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict

docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs serve

clean:
	rm -rf $(VENV) $(DOCS_VENV) build dist site *.egg-info .pytest_cache
