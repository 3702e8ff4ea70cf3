# The two commands a user needs (README): `make demo` and `make test`. Both install what they
# need first and skip work already done (installed packages, fetched data, existing build).
PRESET ?= release
BUILD  := build/$(PRESET)
BRAID  := $(BUILD)/src/braid/cli/braid
JOBS   ?= $(shell nproc)

.PHONY: all deps test-deps data build cuda-build demo finetune-demo test test-long test-asan test-tsan bench format clean

all: build

# The demo's packages; the tests add PyTorch (parity) and clang-format (lint).
deps:
	@scripts/setup-deps.sh demo

test-deps:
	@scripts/setup-deps.sh test

data: deps
	@scripts/fetch-data.sh data

# PCH=ON precompiles the standard headers per target (Note [Precompiled headers]).
$(BUILD)/build.ninja: | deps
	cmake --preset $(PRESET) $(if $(filter ON,$(PCH)),-DBRAID_PCH=ON) > /dev/null

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# Build, fetch the corpus and tokenizer, tokenise, train a small GPT-2 on 2 ranks, print samples.
demo: build data
	@test -f data/sotu-tok/meta.json || $(BRAID) prepare-data --input data/sotu \
	    --tokenizer data/gpt2 --out data/sotu-tok
	$(BRAID) launch -n 2 -- $(BRAID) train configs/demo.yaml

# Fine-tuning an HF checkpoint on instruction data (examples/finetune/README.md): a base LLaMA
# checkpoint, arithmetic.jsonl through the llama3 template, 2 ranks, export with the tokenizer.
finetune-demo: build data
	examples/finetune/finetune.sh $(BRAID) . out/finetune

# The CUDA backend (braid_cuda: kernels, cuBLASLt, NCCL, their tests and the GPU benchmark),
# compiled where nvcc is installed so it never rots: beside the CPU build, in the same tree
# (BRAID_CUDA_CHECK: the CPU objects and the braid binary are unchanged, Note [Device kernels]).
# Its tests (label cuda) run with the others in `make test` and skip without a GPU
# (tools/gpu_run.sh runs them on one). Warnings are errors, as
# everywhere. `cmake --preset cuda` makes a build whose braid runs on the GPU.
NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
cuda-build: build
	@if [ -z "$(NVCC)" ]; then echo "cuda-build: no nvcc here, the CUDA backend is not built"; \
	else cmake $(BUILD) -DBRAID_CUDA_CHECK=ON -DCMAKE_CUDA_COMPILER=$(NVCC) > /dev/null && \
	  cmake --build $(BUILD) -j $(JOBS) --target cuda_targets; fi

# Every test: unit tests (thread-backed ranks), real multi-process tests under mpirun, parity;
# not the long fault loops (label long: make test-long). The CUDA backend is compiled too.
# OMP_WAIT_POLICY=passive: ctest runs tests side by side and many put several ranks on a core;
# OpenMP's threads then sleep at a barrier instead of spinning out the time slice a rank of the
# other test needs (the suite took 495 s instead of 631-665 s on 2 cores, docs/testing.md).
# A failed run ends with each failed test's output again (testing/failed_output.sh): a CI
# summary that keeps only the log's tail then shows why.
TEST_ENV := BRAID_DATA_DIR=$(CURDIR)/data OMP_WAIT_POLICY=passive
test: test-deps build data cuda-build
	cd $(BUILD) && { $(TEST_ENV) ctest --output-on-failure -j $(JOBS) --timeout 300 -LE long || \
	  { $(CURDIR)/testing/failed_output.sh .; exit 1; }; }

# The long fault loops (label long): the restart kill loop, 20 SIGKILLs under
# braid launch --max-restarts, about 2 minutes.
test-long: test-deps build data
	cd $(BUILD) && { $(TEST_ENV) ctest --output-on-failure -L long || \
	  { $(CURDIR)/testing/failed_output.sh .; exit 1; }; }

test-asan: test-deps data
	$(MAKE) PRESET=asan-ubsan build
	cd build/asan-ubsan && $(TEST_ENV) ctest --output-on-failure -L unit -j $(JOBS)

test-tsan: test-deps data
	$(MAKE) PRESET=tsan build
	cd build/tsan && $(TEST_ENV) OMP_NUM_THREADS=1 BRAID_NUM_THREADS=1 \
	  TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/cmake/tsan-suppressions.txt" \
	  ctest --output-on-failure -L unit -j $(JOBS)

format:
	git ls-files '*.cpp' '*.h' | xargs clang-format -i

clean:
	rm -rf build
