"""`cooprl/tracking.py`'s metrics.jsonl as a later reader finds it: a run killed while writing a line leaves half a
line at the end; the reader skips it and says so (walk of issue 36; a resume's cut: trainers/test_loop.py, the plot's
refusal: test_plot.py)."""

import json

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
