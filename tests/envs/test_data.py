"""The code task's problems (envs/code_generation/data.py): HumanEval offline with slices, the split syntax, local
JSONL and JSON files and their errors, an unreachable hub data set."""

import json

import pytest

from envs.code_generation.data import DatasetError, load_problems, parse_split


def test_humaneval_loads_offline_with_slices():
    problems = load_problems({"type": "humaneval"}, "test")
    assert len(problems) == 164 and problems[0].task_id == "HumanEval/0"
    assert problems[0].entry_point == "has_close_elements" and "def check(" in problems[0].test
    assert "canonical_solution" in problems[0].extra
    train = load_problems({"name": "openai/openai_humaneval"}, "test[33:163]")
    assert len(train) == 130 and train[0].task_id == "HumanEval/33"
    assert [p.task_id for p in load_problems({"type": "humaneval"}, "test[:3]")] == ["HumanEval/0", "HumanEval/1",
                                                                                     "HumanEval/2"]
    assert len(load_problems({"type": "humaneval"}, "test[-4:]")) == 4


def test_split_syntax():
    assert parse_split("train[16:]") == ("train", slice(16, None))
    assert parse_split("test") == ("test", slice(None, None))
    with pytest.raises(DatasetError, match="expected NAME or NAME"):
        parse_split("test[1:2")


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


GOOD = {"task_id": "T/0", "prompt": "def f(x):\n", "test": "def check(candidate):\n    assert candidate(1) == 1\n",
        "entry_point": "f"}


def test_local_jsonl_and_json(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [GOOD, {**GOOD, "task_id": "T/1", "difficulty": "easy"}])
    problems = load_problems({"path": str(path)}, "train[1:]")
    assert [p.task_id for p in problems] == ["T/1"] and problems[0].extra == {"difficulty": "easy"}
    (tmp_path / "p.json").write_text(json.dumps({"test": [GOOD]}))
    assert load_problems({"path": str(tmp_path / "p.json")}, "test")[0].entry_point == "f"


@pytest.mark.parametrize("bad,message", [
    ({k: v for k, v in GOOD.items() if k != "entry_point"}, "record 'T/0': field 'entry_point' is missing"),
    ({**GOOD, "test": "assert f(1) == 1"}, "record 'T/0': field 'test' has no 'def check(' function"),
    ({**GOOD, "prompt": 3}, "field 'prompt' is missing or not a non-empty string"),
])
def test_malformed_records_are_named(tmp_path, bad, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, bad])
    with pytest.raises(DatasetError) as err:
        load_problems({"path": str(path)}, "train")
    assert message in str(err.value) and "bad.jsonl[1]" in str(err.value)


def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(DatasetError, match="file not found"):
        load_problems({"path": str(tmp_path / "none.jsonl")}, "train")
    (tmp_path / "broken.jsonl").write_text('{"task_id": \n')
    with pytest.raises(DatasetError, match="broken.jsonl:1: not valid JSON"):
        load_problems({"path": str(tmp_path / "broken.jsonl")}, "train")


@pytest.mark.slow
def test_unreachable_hub_dataset_suggests_offline_set(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetError) as err:
        load_problems({"name": "OpenMLRL/CoopHumanEval-does-not-exist"}, "test")
    assert "could not be loaded from the hub" in str(err.value) and "dataset.name: coop" in str(err.value)
