"""The stale-weights guard (cooprl.rollout.vllm_guard) against vLLM's real CPU build: deliberately broken syncs (a
layer's weights not pushed, an old LoRA version requested, a wake without reload) are each caught at the first
optimizer step after them, with one error; correct syncs pass (here and through the whole runs of test_runs.py and
test_ddp.py, where the guard is on by default). Each test prints the gaps it saw (`pytest -s`); docs/vllm.md quotes
them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cooprl.models.loading import load_tokenizer
from cooprl.rollout import vllm_generation
from cooprl.rollout.generation import SamplingParams
from cooprl.rollout.vllm_engines import EngineOptions, engine_worker
from cooprl.rollout.vllm_generation import VLLMGenerator, merged_weights, watch_optimizer
from cooprl.rollout.vllm_guard import EngineWeightsError, weight_guard
from cooprl.rollout.vllm_platform import check_vllm_backend
from tests.cooprl.vllm_real.test_engine import trained_model

ROOT = Path(__file__).parents[3]
PARAMS = SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1.0)
PROMPTS = ["def add(a, b):", "Write a function that reverses a list."]


class GapLog:
    """Records each check's gap (wraps the guard's `check`), for the figures the tests print."""

    def __init__(self, generator: VLLMGenerator):
        self.gaps: list[float] = []
        check = generator.guard.check

        def recorded(*args):
            try:
                gap = check(*args)
            except EngineWeightsError as error:
                self.gaps.append(float(str(error).split(" probe tokens is ")[1].split(" ")[0]))
                raise
            self.gaps.append(gap.mean)
            return gap
        generator.guard.check = recorded


def guarded_generator(tiny32: str, lora: bool):
    """Return (trained model, its generator with the default float32 guard, its optimizer, the gap log)."""
    model = trained_model(tiny32, lora=lora)
    options = EngineOptions(model_path=tiny32, max_prompt_tokens=32, max_model_len=128,
                            weight_sync="lora" if lora else "merged")
    generator = VLLMGenerator(model, load_tokenizer(tiny32), options, vllm_module=check_vllm_backend("cpu"),
                              guard=weight_guard(None, torch.float32, "agent 0"))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    watch_optimizer(optimizer, generator)
    return model, generator, optimizer, GapLog(generator)


def train_step(model, generator, optimizer) -> None:
    """One update on the generator's own samples: a forward with gradients, the backward, the optimizer step."""
    [[completion]] = generator.sample(PROMPTS[:1], 1, PARAMS)
    ids = torch.cat([completion.prompt_ids, completion.completion_ids]).unsqueeze(0)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def test_a_layer_not_pushed_is_caught_at_the_next_step(tiny32, monkeypatch):
    model, generator, optimizer, log = guarded_generator(tiny32, lora=False)
    for _ in range(2):   # correct merged pushes pass
        train_step(model, generator, optimizer)
    pushed = vllm_generation.merged_weights   # from now on the pushes leave layer 1 out
    monkeypatch.setattr(vllm_generation, "merged_weights",
                        lambda m: ((n, t) for n, t in pushed(m) if ".layers.1." not in n))
    with pytest.raises(EngineWeightsError, match="^agent 0's vLLM engine samples other weights than the trained model "
                                                 "after the merged weight push of version 3: the mean log-prob gap"):
        train_step(model, generator, optimizer)
    print(f"\nmerged sync, layer 1 not pushed: gaps {log.gaps}")
    assert len(log.gaps) == 3 and max(log.gaps[:2]) < 1e-4 and log.gaps[2] > 0.01


def test_an_old_lora_version_and_a_wake_without_reload_are_caught_at_the_next_step(tiny32, monkeypatch):
    model, generator, optimizer, log = guarded_generator(tiny32, lora=True)
    train_step(model, generator, optimizer)
    train_step(model, generator, optimizer)   # adapter version 2 passes
    save = VLLMGenerator._save_adapter
    kept = {}

    def stuck(self, version):   # an engine asked for the first adapter version saved from now on
        kept.setdefault("request", save(self, version))
        return kept["request"]

    monkeypatch.setattr(VLLMGenerator, "_save_adapter", stuck)
    train_step(model, generator, optimizer)   # samples version 3 (the first saved since), rightly
    with pytest.raises(EngineWeightsError, match="after the LoRA sync of adapter version 4: the mean log-prob gap"):
        train_step(model, generator, optimizer)   # asks for version 3 again instead of 4
    print(f"\nLoRA sync, version 3 requested for 4: gaps {log.gaps}")
    assert len(log.gaps) == 4 and max(log.gaps[:3]) < 1e-4 and log.gaps[3] > 0.01
    monkeypatch.undo()
    generator.mark_stale()   # a new version, saved properly at the next sync

    # sleep at level 1 (LoRA sync), emulated on the CPU build, which has no sleep mode: asleep, the engine's weights are
    # gone (zeros pushed in their place); a correct wake-up reloads the checkpoint's base weights, a broken one nothing
    worker = engine_worker(generator.llm)
    base = load_file(str(Path(tiny32) / "model.safetensors"))
    generator.sleep = True
    model.get_input_embeddings().register_forward_pre_hook(generator._sleep_for_update)
    generator.llm.sleep = lambda level: worker.reload_weights(
        weights_iterator=((n, torch.zeros_like(t)) for n, t in merged_weights(model)), is_checkpoint_format=True)
    generator.llm.wake_up = lambda tags=None: worker.reload_weights(weights_iterator=iter(base.items()),
                                                                    is_checkpoint_format=True)
    del log.gaps[:]
    train_step(model, generator, optimizer)   # a correct level-1 cycle passes
    generator.llm.wake_up = lambda tags=None: None
    with pytest.raises(EngineWeightsError, match="on waking from a level-1 sleep: the mean log-prob gap"):
        train_step(model, generator, optimizer)
    print(f"LoRA sync, level-1 wake without reload: gaps {log.gaps}")
    assert len(log.gaps) == 2 and log.gaps[0] < 1e-4 and log.gaps[1] > 0.01


def test_a_run_with_a_broken_push_stops_with_one_error_line(tiny32, tmp_path):
    """The command line: a merged push that leaves out a layer stops train_grpo.py at the first step after the first
    update (the start's push is whole, so the first step passes), with one `error:` line and exit status 2; the guard is
    on by default."""
    breaking = ("import runpy, sys\n"
                "import cooprl.rollout.vllm_generation as g\n"
                "pushed, calls = g.merged_weights, []\n"
                "def broken(model):\n"
                "    calls.append(1)\n"
                "    return ((n, t) for n, t in pushed(model) if len(calls) == 1 or '.layers.1.' not in n)\n"
                "g.merged_weights = broken\n"
                "sys.argv = sys.argv[1:]\n"
                "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", breaking, "train_grpo.py", "--config", "configs/grpo_he_config.yaml", "--override",
         f"agent_model.name={tiny32}", "agent_model.device=cpu", "agent_model.torch_dtype=float32",
         "agent_model.generation_backend=vllm", "agent_model.max_length=512", "dataset.name=coop",
         "dataset.type=coophumaneval", "grpo.max_steps=3", "grpo.num_turns=1", "grpo.max_new_tokens=16",
         "grpo.num_generations=2", "grpo.eval_at_start=false", "grpo.eval_interval=0", "grpo.rollout_buffer_size=1",
         # a random model earns no reward: a reward shifted to -1 and raw advantages make every step move the weights
         "grpo.learning_rate=1e-2", "grpo.advantage_mode=raw", "grpo.advantage_normalization=false",
         "reward_processor.enabled=true", "reward_processor.shift=-1.0", f"output.base_dir={tmp_path}",
         "output.run_name=broken"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 2, (result.stdout + result.stderr)[-3000:]
    assert "Traceback" not in result.stderr
    # one error (on the line where the progress bar stood)
    [error] = [line[line.index("error: "):] for line in result.stderr.splitlines() if "error: " in line]
    print(f"\n{error}")
    assert error.startswith("error: agent 0's vLLM engine samples other weights than the trained model after the "
                            "merged weight push of version 2: the mean log-prob gap on 64 probe tokens is ")
    assert "vLLM engine weights checked after the merged weight push of version 1 (the first sync" in result.stderr
