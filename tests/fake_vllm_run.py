"""Run a training script with a fake vLLM CPU build in this process (tests/cooprl/rollout/test_vllm_engines.py starts it
under torchrun): `python tests/fake_vllm_run.py RECORDS_DIR train_magrpo.py --config ...`.

Each engine is tests/cooprl/rollout/test_vllm_generation.py's FakeLLM, and records, in RECORDS_DIR/rank<RANK>.json at
exit: its build options, whether the process group was up when it was built and when it was shut down, the prompts it
sampled, a checksum of each version of the weights pushed into it and the names of the LoRA requests it served."""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.cooprl.rollout.test_vllm_generation import FakeLLM, FakeLoRARequest, FakeSamplingParams  # noqa: E402

RECORDS: list[dict] = []


class RecordingLLM(FakeLLM):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.record = {"executor": str(kwargs.get("distributed_executor_backend")), "seed": kwargs["seed"],
                       "group_at_build": torch.distributed.is_initialized(), "prompts": [],
                       "cache_root": os.environ.get("VLLM_CACHE_ROOT")}
        RECORDS.append(self.record)

    def generate(self, prompts, sampling_params, use_tqdm=True, **options):
        self.record["prompts"] += [p["prompt_token_ids"] for p in prompts]
        return super().generate(prompts, sampling_params, use_tqdm, **options)

    def shutdown(self):
        super().shutdown()
        self.record["group_at_shutdown"] = torch.distributed.is_initialized()
        self.record["pushed_weights"] = [sum(float(t.double().sum()) for t in load.values())
                                         for load in self.engine_model.loads]
        self.record["lora_requests"] = [r and r.lora_name for r in getattr(self, "lora_requests", [])]


def install_fake_vllm() -> None:
    """Put the fake vLLM CPU build in sys.modules."""
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = RecordingLLM, FakeSamplingParams
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: True)
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest
    for name, module in {"vllm": vllm, "vllm.platforms": platforms, "vllm.lora": types.ModuleType("vllm.lora"),
                         "vllm.lora.request": request}.items():
        sys.modules[name] = module
    import cooprl.rollout.vllm_generation as generation   # the fake engine has no log-probs: no stale-weights guard
    generation.weight_guard = lambda *args: None


def main() -> None:
    records_dir, script, *args = sys.argv[1:]
    install_fake_vllm()
    atexit.register(lambda: Path(records_dir, f"rank{os.environ.get('RANK', '0')}.json").write_text(
        json.dumps(RECORDS)))
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
