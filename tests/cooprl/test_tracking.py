"""`cooprl/tracking.py`'s metrics.jsonl as a later reader finds it: a run killed while writing a line leaves half a
line at the end; a resume, the summary and the plot read the events around it (walk of issue 36)."""

import json

from cooprl.plot import main as plot_main
from cooprl.tracking import read_metrics
from cooprl.trainers.loop import _truncate_metrics

EVENTS = [{"step": 0, "eval/turn_1/reward_mean": 0.5}, {"step": 1, "turn_1/reward_mean": 1.0},
          {"step": 2, "turn_1/reward_mean": 2.0}]


def write(folder, tail=""):
    (folder / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS) + tail, encoding="utf-8")


def test_a_line_cut_off_by_a_kill_is_skipped_and_said(tmp_path, caplog):
    write(tmp_path, '{"step": 3, "turn_1/rew')
    assert read_metrics(tmp_path) == EVENTS
    assert "skipped 1 line(s)" in caplog.text and "line 4" in caplog.text


def test_a_resume_rewrites_the_file_so_the_next_event_is_not_glued_to_the_cut_line(tmp_path):
    write(tmp_path, '{"step": 3, "turn_1/rew')
    _truncate_metrics(tmp_path, 2)   # what a resume from step 2 does before it appends
    with (tmp_path / "metrics.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps({"step": 3, "turn_1/reward_mean": 3.0}) + "\n")
    assert [e["step"] for e in read_metrics(tmp_path)] == [0, 1, 2, 3]


def test_lines_that_are_no_event_are_skipped(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('[1, 2]\n"text"\n{"step": "x"}\n{"step": 1, "a": 1}\n', encoding="utf-8")
    assert read_metrics(tmp_path) == [{"step": 1, "a": 1}]


def test_the_plot_refuses_metrics_with_nothing_to_draw(tmp_path, capsys):
    # events without a reward or a loss, or whose values are no numbers: one error line, exit 2, no empty plot
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "foo": 1}\n{"step": 2, "turn_1/reward_mean": "a"}\n',
                                            encoding="utf-8")
    assert plot_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "no reward or loss to plot" in err and "Traceback" not in err
    assert not (tmp_path / "rewards.png").exists()
