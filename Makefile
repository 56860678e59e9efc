# The two commands of the README: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# setuptools' note on every editable install (a block of asterisks between "!!"
# lines) is for package authors: not shown by `make demo` and `make test`
QUIET_BUILD := PYTHONWARNINGS="ignore:Editable installation"

.PHONY: setup demo test test-all lint isa-doc bench fpga clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(QUIET_BUILD) $(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/tensorfab demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -n 2 -m "not slow"

test-all: $(STAMP)
	$(BIN)/pytest -n 2

lint: $(STAMP)
	$(BIN)/ruff check .

isa-doc: $(STAMP)
	$(BIN)/python -m tensorfab.isa.docgen docs/isa.md

bench: $(STAMP)
	$(BIN)/python -m tensorfab.benches.fsim_gemm

# every board's bitstream, its report and a PNG of utilization (minutes per board)
fpga: $(STAMP)
	$(BIN)/python benches/fpga.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
