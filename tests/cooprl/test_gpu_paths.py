"""What a GPU run needs of code that runs on CPU here: checkpoints that load into CPU memory, models that follow each
process's GPU under ddp, bench/gpu_check.sh's budget. Where a GPU is needed, the CUDA calls are observed instead (no GPU
runs these tests). Those of one module are in its own file: the evaluation's generators in trainers/test_loop.py,
sampling with exactly the configured parameters in rollout/test_generation.py, devices and sharded work in
parallel/test_distributed.py."""

import os
from pathlib import Path

import pytest
import torch

from cooprl import checkpoint as ckpt
from cooprl.config import Run
from cooprl.update.optim import build_adamw


# ------------------------------------------------------------------------------------------------ checkpoints
def trained_linear():
    from safetensors.torch import save_file
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)

    def save_pretrained(folder: Path) -> None:
        folder.mkdir(parents=True)
        save_file(model.state_dict(), folder / "model.safetensors")
    model.save_pretrained = save_pretrained
    optimizer = build_adamw(model.parameters(), lr=1e-2)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_a_checkpoint_written_on_a_gpu_loads_into_cpu_memory(tmp_path, monkeypatch):
    """The optimizer states of a GPU run are CUDA tensors in trainer_state.pt. Loading puts them in CPU memory: on a
    machine without that GPU the checkpoint is not "damaged", and a resume holds no second GPU copy of them (the
    optimizer moves each state to its parameter)."""
    model, optimizer = trained_linear()
    with monkeypatch.context() as patch:   # as torch.save records the tensors of a run on cuda:0
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        path = ckpt.save_checkpoint(tmp_path, 3, [model], {"algorithm": {"optimizer": optimizer.state_dict()}})
    assert ckpt.find_checkpoint("latest", tmp_path) == path   # (it was "every checkpoint ... is damaged" on a CPU)
    state = ckpt.load_trainer_state(path)["algorithm"]["optimizer"]
    tensors = [v for slots in state["state"].values() for v in slots.values() if isinstance(v, torch.Tensor)]
    assert tensors and {t.device.type for t in tensors} == {"cpu"}
    resumed = build_adamw(model.parameters(), lr=1e-2)
    resumed.load_state_dict(state)
    for p in model.parameters():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(resumed.state[p][key], optimizer.state[p][key])
            assert resumed.state[p][key].device == p.device


def test_loading_reads_into_cpu_memory(tmp_path, monkeypatch):
    """Whatever machine loads it (a GPU one too), torch.load is told to map every tensor to the CPU."""
    model, optimizer = trained_linear()
    path = ckpt.save_checkpoint(tmp_path, 1, [model], {"algorithm": {"optimizer": optimizer.state_dict()}})
    seen = []
    real_load = torch.load

    def load(*args, **kwargs):
        seen.append(kwargs.get("map_location"))
        return real_load(*args, **kwargs)
    monkeypatch.setattr(torch, "load", load)
    ckpt.check_checkpoint(path)
    ckpt.load_trainer_state(path)
    assert seen and set(seen) == {"cpu"}


# ------------------------------------------------------------------------------------------ devices under ddp

def as_second_of_two_processes(monkeypatch):
    """Make cooprl see itself as rank 1 of 2 (LOCAL_RANK 1): what each model's device resolves to is observed."""
    from cooprl.parallel import distributed
    monkeypatch.setattr(distributed, "current", lambda: distributed.Ranks(rank=1, world_size=2, local_rank=1))


def test_critic_comparator_and_reward_model_follow_each_processs_gpu(monkeypatch, tmp_path):
    """Configured on cuda:0, each lands on this rank's GPU (cuda:1 on rank 1): loading fails on this CPU machine,
    naming the device it was sent to."""
    from cooprl.preferences.comparators import _model_generators
    from cooprl.config import load_config
    from cooprl.models.loading import ModelError
    from cooprl.trainers import actor_critic, marlhf
    as_second_of_two_processes(monkeypatch)
    base = ["agent_model.name=offline:tiny-random", "agent_model.device=cpu", "wandb.mode=disabled"]
    config = load_config(None, [*base, "iac.critic_devices=cuda:0", "marlhf.reward_model_device=cuda:0",
                                "madpo_iter.comparator_devices=cuda:0"])
    monkeypatch.setattr(actor_critic, "build_team", lambda *args: [type("Agent", (),
                                                                        {"name": "offline:tiny-random"})()])
    with pytest.raises(ModelError, match="device 'cuda:1'"):
        actor_critic.build_iac(Run.of(config, "iac"), type("Task", (), {"num_agents": 1, "agent_rewards": False,
                                                              "stop_strings": ()})())
    with pytest.raises(ModelError, match="device 'cuda:1'"):
        marlhf.build_reward_model(Run.of(config, "marlhf"))
    with pytest.raises(ModelError, match="device 'cuda:1'"):
        _model_generators(Run.of(config, "madpo_iter"), ["offline:tiny-random"], 16)


# ------------------------------------------------------------------------------------------- bench/gpu_check.sh
def test_gpu_check_fits_eight_minutes_and_parses(tmp_path):
    """Every stage runs under `timeout -k 5 LIMIT`, cut to what is left of the check's 475 s budget: the limits of the
    stages that need no vLLM and the kill grace add up to under 8 minutes (the vLLM stage skips in seconds where vLLM
    is missing, and is cut by the budget where it is not), and `--dry-run` parses every stage's Python and lists the
    stages in the order of what they prove, the preflight first."""
    import re
    import subprocess
    import sys
    script = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.sh"
    text = script.read_text()
    stages = [(name, int(limit)) for name, limit in re.findall(r'^stage "([^"]+)" (\d+) <<', text, re.M)]
    budget = int(re.search(r"^BUDGET=(\d+)", text, re.M).group(1))
    assert len(stages) >= 10 and 'timeout -k 5 "$limit"' in text
    without_vllm = [limit for name, limit in stages if "(vLLM)" not in name]
    assert sum(without_vllm) + 5 * len(without_vllm) <= budget <= 480 - 5
    subprocess.run(["bash", "-n", str(script)], check=True)
    out = subprocess.run(["bash", str(script), "--dry-run"], capture_output=True, text=True, check=True,
                         env={**os.environ, "PY": sys.executable, "WORK": str(tmp_path)}).stdout
    assert "!!!" not in out
    listed = re.findall(r"^stage (\d+)s: (.+)$", out, re.M)
    assert [(name, int(limit)) for limit, name in listed] == stages
    order = [name.split(":")[0] for name, _ in stages]
    assert order[:4] == ["preflight", "model", "trie", "command line"]
    assert {"bf16 norm", "vllm", "memory plan", "gpu_stages", "sdpa"} <= set(order)
    assert f"{sum(limit for _, limit in stages) + 5 * len(stages)}s of the {budget}s budget" in out


STAGES = """
stage "passing" 5 <<'EOF'
print("PASS: 3 of 3")
EOF
stage "skipping" 5 <<'EOF'
print("SKIP: no GPU here")
EOF
stage "first" 30 <<'EOF'
import time; time.sleep(30)
EOF
stage "second" 30 <<'EOF'
print("ran")
EOF
"""


@pytest.mark.cli   # runs bench/gpu_check.sh's stage function in bash, 5 s of it a stage's timeout
def test_the_gpu_checks_stages_report_as_they_go_and_never_run_past_its_budget(tmp_path):
    """Each stage's verdict goes to the report's summary.txt as soon as it ends (PASS, or the SKIP/FAIL line its Python
    printed, or FAIL for a non-zero exit or a timeout); a stage that would run past what is left of the budget is cut
    to it, and one with under 5 s left is skipped, so added stages cannot push the check past 8 minutes: the script's
    `stage` function with a 12 s budget."""
    import subprocess
    import sys
    script = (Path(__file__).resolve().parents[2] / "bench" / "gpu_check.sh").read_text()
    function = script[script.index("stage() {"):script.index("\n}\n", script.index("stage() {")) + 3]
    test = (f"PY={sys.executable}; DRY_RUN=0; BUDGET=12; PLANNED=0; START=$(date +%s); DEVICE=cuda; SCALE=1; "
            f"WORK={tmp_path}; OUT={tmp_path}\n{function}\n{STAGES}\necho \"after $(( $(date +%s) - START ))s\"\n")
    out = subprocess.run(["bash", "-c", test], capture_output=True, text=True, timeout=60).stdout
    assert "=== first (limit " in out and "!!! first failed or timed out" in out
    assert int(out.split("=== first (limit ")[1].split("s")[0]) <= 7   # what was left of the 12 s, less 5 s of grace
    assert "=== second skipped: the check's 12s are spent" in out and "ran" not in out
    assert int(out.rsplit("after ", 1)[1].rstrip("s\n")) <= 12
    lines = (tmp_path / "summary.txt").read_text().splitlines()
    assert [line.split(" (")[0] + line.split(")", 1)[1] for line in lines] == [
        "PASS passing: 3 of 3", "SKIP skipping: no GPU here", "FAIL first: exit status 124, timed out",
        "SKIP second: the check's 12s were spent"]
