"""`cooprl/tracking.py`'s metrics.jsonl as a later reader finds it: a run killed while writing a line leaves half a
line at the end; the reader skips it and says so (walk of issue 36; a resume's cut: trainers/test_loop.py, the plot's
refusal: test_plot.py)."""

import json
import time

import pytest

from cooprl.tracking import read_metrics

EVENTS = [{"step": 0, "eval/turn_1/reward_mean": 0.5}, {"step": 1, "turn_1/reward_mean": 1.0},
          {"step": 2, "turn_1/reward_mean": 2.0}]


def write(folder, tail=""):
    (folder / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS) + tail, encoding="utf-8")


def test_a_line_cut_off_by_a_kill_is_skipped_and_said(tmp_path, caplog):
    write(tmp_path, '{"step": 3, "turn_1/rew')
    assert read_metrics(tmp_path) == EVENTS
    assert "skipped 1 line(s)" in caplog.text and "line 4" in caplog.text


def test_lines_that_are_no_event_are_skipped(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('[1, 2]\n"text"\n{"step": "x"}\n{"step": 1, "a": 1}\n', encoding="utf-8")
    assert read_metrics(tmp_path) == [{"step": 1, "a": 1}]


def until(check, seconds=60.0):
    """Return True once `check()` holds (W&B's service writes its files after `finish` returns), False after
    `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def wandb_rows(wandb_dir, run_id):
    """Return the (step, keys) of the rows each of the W&B run's files holds, file by file (one per start)."""
    from cooprl.tracking import _log_records
    from wandb.proto import wandb_internal_pb2
    files = []
    for path in sorted(wandb_dir.glob(f"*-{run_id}/run-{run_id}.wandb")):
        rows = []
        for raw in _log_records(path.read_bytes()):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(raw)
            if record.WhichOneof("record_type") == "history":
                row = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                       for item in record.history.item}
                rows.append((row.get("step"), "eval/turn_1/reward_mean" in row))
        files.append(rows)
    return files


@pytest.mark.slow   # W&B's service starts twice (seconds)
def test_a_resumed_w_and_b_run_gets_the_steps_a_killed_process_had_not_written(tmp_path, monkeypatch):
    # after kill -9, offline W&B had written none of the killed process's steps: metrics.jsonl had them all
    from cooprl.config import load_config
    from cooprl.tracking import RunTracker, logged_in_wandb
    monkeypatch.setenv("WANDB_SILENT", "true")
    wandb_cfg = load_config(None, ["wandb.mode=offline"]).wandb
    first = RunTracker(tmp_path, wandb_cfg, {}, "run")
    run_id = first.wandb_id
    for event in EVENTS[:2]:
        first.log({k: v for k, v in event.items() if k != "step"}, event["step"], event["step"])
    first.close()
    held = {(0, frozenset({"step", "env_step", "eval/turn_1/reward_mean"})),
            (1, frozenset({"step", "env_step", "turn_1/reward_mean"}))}
    assert until(lambda: logged_in_wandb(tmp_path / "wandb", run_id) == held)
    # what the killed process wrote to metrics.jsonl alone: step 2, and an evaluation at step 1
    with (tmp_path / "metrics.jsonl").open("a") as f:
        for event in ({"step": 1, "env_step": 1, "eval/turn_1/reward_mean": 0.25}, {**EVENTS[2], "env_step": 2}):
            f.write(json.dumps({**event, "wall_time": 1.0}) + "\n")
    time.sleep(1.1)
    resumed = RunTracker(tmp_path, wandb_cfg, {}, "run", resume_id=run_id)
    resumed.log({"turn_1/reward_mean": 3.0}, 3, 3)
    resumed.close()
    rows = [[(0, True), (1, False)], [(1, True), (2, False), (3, False)]]
    assert until(lambda: wandb_rows(tmp_path / "wandb", run_id) == rows), wandb_rows(tmp_path / "wandb", run_id)
    # resumed again with nothing missing: nothing sent twice
    time.sleep(1.1)   # W&B names a start's folder by its second: two in one second would share it
    again = RunTracker(tmp_path, wandb_cfg, {}, "run", resume_id=run_id)
    again.log({"turn_1/reward_mean": 4.0}, 4, 4)
    again.close()
    rows.append([(4, False)])
    assert until(lambda: wandb_rows(tmp_path / "wandb", run_id) == rows), wandb_rows(tmp_path / "wandb", run_id)


def test_a_w_and_b_log_cut_off_by_a_kill_yields_its_whole_records(tmp_path):
    import struct

    import pytest

    from cooprl.tracking import _log_records

    def chunk(payload, kind):
        return struct.pack("<IHB", 0, len(payload), kind) + payload
    whole = b":W&B\x00\x00\x01" + chunk(b"one", 1) + chunk(b"tw", 2) + chunk(b"o", 4)
    assert list(_log_records(whole)) == [b"one", b"two"]
    assert list(_log_records(whole + chunk(b"three", 1)[:9])) == [b"one", b"two"]   # the last one cut off
    # a record that crosses a 32 KiB block: its padding is skipped
    big = b"x" * (32768 - 7 - 7 - 3)
    data = b":W&B\x00\x00\x01" + chunk(big, 1) + b"\x00" * 3 + chunk(b"next", 1)
    assert list(_log_records(data)) == [big, b"next"]
    with pytest.raises(ValueError, match="not a W&B file"):
        list(_log_records(b"garbage"))
