# The two commands of the README. `.ci/run` calls `make setup test` on a clean checkout.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup run test lint

$(BIN)/python:
	$(PY) -m venv $(VENV)

setup: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

# The main job on a small default: build the tiny SigLIP, run the nn passes and evaluate it.
run:
	$(BIN)/ipu-run --model siglip-tiny --tiles 16 --inferences 3 --compare-reference

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/pytest -n 2
	$(BIN)/lit -q tests/
