"""evaluate.py as a user runs it: the untrained models as a baseline (no checkpoint), the whole eval split with
pass@k, a run folder, JSON output; in-process through `evaluate.main`."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import evaluate  # noqa: E402

import pytest

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`

TINY = ["agent_model.name=offline:tiny-random", "agent_model.device=cpu", "agent_model.torch_dtype=float32",
        "dataset.name=coop", "dataset.type=coophumaneval", "dataset.eval_split=test[:3]", "wandb.mode=disabled",
        "magrpo.max_new_tokens=6", "magrpo.num_turns=1"]


def test_baseline_whole_split_with_pass_at_k(tmp_path, capsys):
    out = tmp_path / "baseline.json"
    code = evaluate.main(["--config", "configs/magrpo_che_config.yaml", "--samples", "all", "--generations", "2",
                          "--pass-k", "1", "2", "--override", *TINY, "--output", str(out)])
    assert code == 0, capsys.readouterr().err
    metrics = json.loads(out.read_text())
    assert {"eval/turn_1/pass@1", "eval/turn_1/pass@2"} <= set(metrics)
    assert 0.0 <= metrics["eval/turn_1/pass@1"] <= metrics["eval/turn_1/pass@2"] <= 1.0
    assert "the starting models on 3 problems" in capsys.readouterr().err


def test_bad_samples_and_missing_config_are_one_line(capsys):
    assert evaluate.main(["--config", "configs/no_such.yaml", "--samples", "3"]) == 2
    assert "config file 'configs/no_such.yaml' not found" in capsys.readouterr().err
    # no --config: the default config (magrpo's reference config), read and checked like any other
    assert evaluate.main(["--samples", "3", "--override", "magrpo.num_generatoins=2"]) == 2
    assert "magrpo.num_generatoins: unknown key; did you mean magrpo.num_generations" in capsys.readouterr().err
    assert evaluate.main(["--trainer", "iac", "--samples", "3", "--override", "iac.num_turns=0"]) == 2
    assert "iac.num_turns" in capsys.readouterr().err
    assert evaluate.main(["--config", "configs/magrpo_che_config.yaml", "--samples", "-1", "--override", *TINY]) == 2
    assert "--samples" in capsys.readouterr().err
    assert evaluate.main(["--config", "configs/magrpo_che_config.yaml", "--generations", "1", "--pass-k", "5",
                          "--override", *TINY]) == 2
    assert "eval_pass_k" in capsys.readouterr().err


def test_a_run_folder_with_its_newest_checkpoint(tmp_path, capsys):
    from envs.launch import train_main
    run_args = ["--config", "configs/magrpo_che_config.yaml", "--override", *TINY, "magrpo.max_steps=1",
                "magrpo.num_generations=2", "magrpo.eval_num_samples=1", f"output.base_dir={tmp_path}",
                "output.run_name=r"]
    assert train_main("magrpo", run_args) == 0
    capsys.readouterr()
    assert evaluate.main(["--run", str(tmp_path / "r"), "--samples", "2"]) == 0
    captured = capsys.readouterr()
    assert "checkpoint-1 on 2 problems" in captured.err and "eval/turn_1/pass@1" in captured.out
