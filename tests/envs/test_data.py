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


def cache_hub_dataset(cache, repo_id, records):
    """Write `records` as split `train` of hub dataset `repo_id` into the `datasets` cache folder `cache`, laid out as
    `load_dataset` leaves a downloaded hub dataset (no network: the json builder prepares it, then it moves)."""
    import shutil

    from datasets.packaged_modules.json.json import Json
    source = write_jsonl(cache.parent / "source.jsonl", records)
    builder = Json(cache_dir=str(cache.parent / "build"), dataset_name="set", data_files={"train": str(source)},
                   hash="0123abcd")
    builder.download_and_prepare()
    (built,) = (cache.parent / "build" / "set").glob("*/*/0123abcd")
    owner, name = repo_id.split("/")
    shutil.copytree(built, cache / f"{owner}___{name}" / "default" / "0.0.0" / "0123abcd")
    (cache / f"{owner}___{name}" / "default" / "0.0.0" / "0123abcd" / "set-train.arrow").rename(
        cache / f"{owner}___{name}" / "default" / "0.0.0" / "0123abcd" / f"{name}-train.arrow")


@pytest.fixture
def unreachable_hub(tmp_path, monkeypatch):
    """An HF_ENDPOINT that refuses connections (a port nothing listens on), an empty `datasets` cache, no offline
    variable set; returns the cache folder."""
    import socket

    import datasets

    from cooprl.models import loading
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(loading, "_hub_unreachable", {})
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    return tmp_path / "cache"


@pytest.mark.slow
def test_a_hub_dataset_with_no_network_is_one_error_at_once_and_a_cached_one_loads(unreachable_hub, monkeypatch):
    # datasets retried for ~30 s (5 retries of its HEAD request) before its own error, cached or not
    import os
    import time
    import urllib.request
    cache_hub_dataset(unreachable_hub, "someone/cached-set", [GOOD, {**GOOD, "task_id": "T/1"}])
    started = time.monotonic()
    problems = load_problems({"name": "someone/cached-set"}, "train[1:]")
    assert [p.task_id for p in problems] == ["T/1"]
    assert load_problems({"name": "someone/cached-set"}, "test")[0].task_id == "T/0"   # the split renamed, as before
    with pytest.raises(DatasetError) as err:
        load_problems({"name": "someone/not-cached-set"}, "train")
    assert time.monotonic() - started < 10
    endpoint = os.environ["HF_ENDPOINT"]
    assert str(err.value).startswith(
        f"dataset 'someone/not-cached-set' could not be loaded from the hub: not in the local Hugging Face datasets "
        f"cache, and {endpoint} cannot be reached (")
    assert str(err.value).endswith("; connect to the network, or use `dataset.name: coop` (the shipped cooperative "
                                   "set) or `dataset.type: humaneval`, or give a local file with `dataset.path`")
    assert "\n" not in str(err.value)
    for variable in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):   # offline set: the cache alone, no probe
        monkeypatch.setattr(urllib.request, "urlopen", None)
        monkeypatch.setenv(variable, "1")
        assert len(load_problems({"name": "someone/cached-set"}, "train")) == 2
        with pytest.raises(DatasetError, match=f"datasets cache, and {variable} is set; unset {variable} where there "
                                               f"is a network, or use `dataset.name: coop`"):
            load_problems({"name": "someone/not-cached-set"}, "train")
        monkeypatch.delenv(variable)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")   # datasets' own variable wins over HF_HUB_OFFLINE
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DatasetError, match="cannot be reached"):
        load_problems({"name": "someone/not-cached-set"}, "train")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("bad,why", [
    ({"test": "def check(candidate):\n    assert candidate(1) == 1)\n"},
     "its test does not parse: unmatched ')' (line 2)"),
    ({"test": "def check(candidate):\n\tassert candidate(1)\n        return\n"}, "its test does not parse"),
    ({"test": "def check(candidate):\n    assert candidate('\x00')\n"},
     "its test does not parse: source code string cannot contain null"),
    ({"entry_point": "g"}, "its prompt defines no g() (the entry point the test calls)"),
    ({"prompt": "# write f(x)\n"}, "its prompt defines no f()"),
    ({"prompt": "def fx(x):\n"}, "its prompt defines no f()"),       # another function whose name starts alike
    ({"prompt": "import math\n\n\ndef  f (x: int) -> int:\n"}, None),
])
def test_a_problem_that_can_never_pass_is_skipped_counted_and_named(tmp_path, caplog, bad, why):
    # the reference solution scored 1.5 or 0.4 of 4.0 on such rows: they were trained and evaluated on silently
    path = write_jsonl(tmp_path / "p.jsonl", [GOOD, {**GOOD, "task_id": "T/1", **bad}, {**GOOD, "task_id": "T/2"}])
    problems = load_problems({"path": str(path)}, "test")
    if why is None:
        assert [p.task_id for p in problems] == ["T/0", "T/1", "T/2"] and not caplog.text
        return
    assert [p.task_id for p in problems] == ["T/0", "T/2"]
    assert f"split 'test': 1 of its 3 problems can never pass and are skipped (T/1: {why}" in caplog.text
    # a slice without it loads without a word; a split of only such problems is an error
    caplog.clear()
    assert [p.task_id for p in load_problems({"path": str(path)}, "test[2:]")] == ["T/2"] and not caplog.text
    with pytest.raises(DatasetError, match="split 'test\\[1:2\\]': none of its 1 problems can pass \\(T/1: "):
        load_problems({"path": str(path)}, "test[1:2]")


def test_the_shipped_problems_can_all_pass(caplog):
    assert len(load_problems({"type": "humaneval"}, "test")) == 164
    assert len(load_problems({"name": "coop"}, "train")) == 85
    assert "can never pass" not in caplog.text
