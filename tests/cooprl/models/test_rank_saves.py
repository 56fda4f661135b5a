"""Every model the project writes is written whole by the process that writes it, under a process group too
(transformers 5.x saves a model's files on rank 0 alone once a group exists): two processes under torchrun, each
saving every kind of folder, rank 1 alone filling an empty model cache."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.environment import child_env

ROOT = Path(__file__).resolve().parents[3]
TORCHRUN = Path(sys.executable).with_name("torchrun")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out, cache = tmp_path_factory.mktemp("saves"), tmp_path_factory.mktemp("empty-cache")
    command = [str(TORCHRUN), "--standalone", "--nproc_per_node=2", "tests/cooprl/models/rank_saves_main.py", str(out)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=child_env(OMP_NUM_THREADS="1", COOPRL_CACHE=str(cache), PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr[-3000:]
    return out, cache, result.stdout


@pytest.mark.distributed
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
def test_a_model_cache_built_by_rank_1_is_whole_and_loads(two_ranks):
    from cooprl.models.loading import MODEL_FILES, _missing_files
    _, cache, stdout = two_ranks
    assert _missing_files(cache / "tiny-random-llama", MODEL_FILES) == []
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == [
        "smollm2-135m-instruct-tokenizer", "tiny-random-llama"]
    logits = sorted(line.split()[-1] for line in stdout.splitlines() if " logits " in line)
    assert len(logits) == 2 and logits[0] == logits[1]   # both ranks loaded the same (seeded) weights


@pytest.mark.distributed
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("path,files", [
    ("final/agent_0", {"config.json", "model.safetensors"}),              # save_model: final models, policy snapshots
    ("gathered/agent_0", {"config.json", "model.safetensors"}),           # save_model with a gathered state dict
    ("checkpoints/checkpoint-1/agent_0", {"config.json", "model.safetensors"}),
    ("critic", {"config.json", "model.safetensors", "value_head.safetensors"}),
    ("vllm_adapter", {"adapter_config.json", "adapter_model.safetensors"}),
])
def test_each_save_writes_its_files_on_every_rank(two_ranks, rank, path, files):
    out, _, _ = two_ranks
    folder = out / f"rank_{rank}" / path
    assert files <= {p.name for p in folder.iterdir()}, sorted(p.name for p in folder.iterdir())
