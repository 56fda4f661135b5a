"""cooprl.run_folders: one writer per run folder, what a new run may find in its folders, which run a checkpoint
continues, the settings a resume keeps (keys an older config.yaml lacks too), and which code made a run."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from cooprl import run_folders
from cooprl.config import ConfigError, Run, load_config

ROOT = Path(__file__).resolve().parents[2]


def holder(folder: Path) -> subprocess.Popen:
    """Start a process that locks `folder` as a training run does and waits; return it once it holds the lock."""
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from cooprl.run_folders import lock_run_folder
        lock_run_folder(Path({str(folder)!r}))
        print("locked", flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "locked"
    return proc


@pytest.mark.slow   # child processes (a second writer): integration, not `make test-fast`
def test_a_run_folder_has_one_writer_and_a_killed_writer_s_lock_is_free(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    proc = holder(folder)
    try:
        with pytest.raises(ConfigError, match=rf"run is being trained by process {proc.pid} on .*one writer at a time"
                                              rf".*then --resume {folder}"):
            run_folders.lock_run_folder(folder)
    finally:
        proc.send_signal(signal.SIGKILL)   # kill -9: no chance to give the lock back
        proc.wait()
    assert f"process {proc.pid}" in (folder / run_folders.LOCK).read_text()   # what the killed writer left
    assert run_folders.lock_run_folder(folder) == folder   # taken over: the kernel freed the dead process's lock
    assert f"process {os.getpid()}" in (folder / run_folders.LOCK).read_text()
    assert run_folders.lock_run_folder(folder) == folder   # this process again: no conflict with itself
    run_folders.unlock_run_folder(folder)
    assert not (folder / run_folders.LOCK).exists()   # a run that ended leaves no lock file
    proc = holder(folder)   # given back: another process takes it
    proc.kill()
    proc.wait()


def test_a_run_that_stops_before_writing_gives_back_its_claimed_and_locked_folder(tmp_path):
    folder = run_folders.lock_run_folder(run_folders.claim_fresh_folder(tmp_path / "run"))
    run_folders.release_unused(folder)
    assert not folder.exists()
    written = run_folders.lock_run_folder(run_folders.claim_fresh_folder(tmp_path / "run"))
    (written / "config.yaml").write_text("{}")
    run_folders.release_unused(written)   # it wrote: kept
    assert written.is_dir()


def test_unfinished_saves_of_a_killed_process_are_removed(tmp_path, caplog):
    checkpoints = tmp_path / "checkpoints"
    for name in (".checkpoint-3-abc12", ".checkpoint-4-x"):
        (checkpoints / name / "agent_0").mkdir(parents=True)
    (checkpoints / "checkpoint-2").mkdir()
    run_folders.remove_unfinished_saves(checkpoints)
    assert [p.name for p in checkpoints.iterdir()] == ["checkpoint-2"]
    assert "removed 2 unfinished checkpoint save(s)" in caplog.text
    run_folders.remove_unfinished_saves(tmp_path / "none")   # no folder yet: nothing to do


def test_a_run_folder_records_the_code_that_made_it_and_each_resume(tmp_path):
    run_folders.record_version(tmp_path, None)
    run_folders.record_version(tmp_path, 7)
    lines = [json.loads(line) for line in (tmp_path / run_folders.VERSIONS).read_text().splitlines()]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert [line["started"] for line in lines] == ["new", "resumed at step 7"]
    assert lines[0]["commit"] == commit.strip() and isinstance(lines[0]["dirty"], bool)
    assert lines[0]["cooprl"] == "0.1.0"   # the version the package declares (pyproject.toml)
    assert "version = \"0.1.0\"" in (ROOT / "pyproject.toml").read_text()


def fake_run(folder: Path, trainer: str = "magrpo", *overrides: str) -> Path:
    folder.mkdir(parents=True)
    config = load_config(None, list(overrides))
    (folder / "config.yaml").write_text(config.to_yaml(trainer), encoding="utf-8")
    (folder / "checkpoints" / "checkpoint-1").mkdir(parents=True)
    (folder / "checkpoints" / "checkpoint-1" / "done").write_text("1")
    return folder


def test_a_key_an_older_config_yaml_lacks_was_trained_at_its_default(tmp_path):
    run = fake_run(tmp_path / "run")
    saved = yaml.safe_load((run / "config.yaml").read_text())
    del saved["magrpo"]["num_generations"], saved["code_prompt"]
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    resumed = [f"output.base_dir={tmp_path}", "output.run_name=run", "checkpoint.resume_from_checkpoint=latest"]
    run_folders.check_resumed_settings(run, load_config(run / "config.yaml", resumed), "magrpo")   # unchanged: fine
    for change, said in (("magrpo.num_generations=3", "magrpo.num_generations 4 (the default: its config.yaml"),
                         ("code_prompt.open_body=true", "code_prompt.open_body False (the default")):
        config = load_config(run / "config.yaml", [*resumed, change])
        with pytest.raises(ConfigError, match=rf"resuming .*{re.escape(said)}.*lacks the key\) -> "):
            run_folders.check_resumed_settings(run, config, "magrpo")
    # a value the older version wrote is compared as before
    with pytest.raises(ConfigError, match=r"seed 42 -> 5 would change"):
        run_folders.check_resumed_settings(run, load_config(run / "config.yaml", [*resumed, "seed=5"]), "magrpo")


def test_another_run_s_checkpoint_starts_a_new_run_held_to_that_run_s_settings(tmp_path, caplog):
    other = fake_run(tmp_path / "other", "magrpo", "magrpo.num_generations=4")
    checkpoint = other / "checkpoints" / "checkpoint-1"
    new = [f"output.base_dir={tmp_path}", f"checkpoint.resume_from_checkpoint={checkpoint}"]
    for change, said in (("magrpo.num_generations=8", "magrpo.num_generations 4 -> 8"),
                         ("magrpo.learning_rate=0.5", "magrpo.learning_rate"),
                         ("dataset.train_split=train[:5]", "dataset.train_split")):
        with pytest.raises(ConfigError, match=rf"resuming {other}: {said}"):
            run_folders.new_run_folder(load_config(None, [*new, change]), "fork", "magrpo")
    assert not (tmp_path / "fork").exists()
    # the checkpoints folder, or the run folder, names the same run
    for spec in (checkpoint, other / "checkpoints", other):
        config = load_config(None, [f"output.base_dir={tmp_path}", f"checkpoint.resume_from_checkpoint={spec}",
                                    "magrpo.num_generations=8"])
        with pytest.raises(ConfigError, match="magrpo.num_generations 4 -> 8"):
            run_folders.new_run_folder(config, "fork", "magrpo")
    # the same settings: a new run, in a new folder (never the other run's, nor a used one)
    (tmp_path / "fork").mkdir()
    (tmp_path / "fork" / "x").write_text("used")
    folder = run_folders.new_run_folder(load_config(None, new), "fork", "magrpo")
    assert folder == tmp_path / "fork-2" and "a new run from" in caplog.text
    assert run_folders.resumed_run(load_config(None, new), tmp_path / "fork-2") == other.resolve()
    # a checkpoint of another trainer's run is refused as --resume refuses it
    grpo = fake_run(tmp_path / "grpo_run", "grpo")
    with pytest.raises(ConfigError, match="is a run of grpo, not magrpo"):
        run_folders.new_run_folder(load_config(None, [f"output.base_dir={tmp_path}",
                                                      f"checkpoint.resume_from_checkpoint={grpo}"]), "x", "magrpo")


def test_resume_from_checkpoint_that_is_not_there_leaves_no_folder(tmp_path):
    for spec, said in (("latest", "latest, but .* holds no complete checkpoint .*a first run has none"),
                       (str(tmp_path / "nope"), "nope is not a folder")):
        config = load_config(None, [f"output.base_dir={tmp_path}", f"checkpoint.resume_from_checkpoint={spec}"])
        with pytest.raises(ConfigError, match=f"checkpoint.resume_from_checkpoint: .*{said}"):
            run_folders.new_run_folder(config, "first", "magrpo")
        assert not (tmp_path / "first").exists()
    # latest with a checkpoint of its own: the run goes on in its folder
    run = fake_run(tmp_path / "run")
    config = load_config(run / "config.yaml", [f"output.base_dir={tmp_path}", "output.run_name=run",
                                               "checkpoint.resume_from_checkpoint=latest"])
    assert run_folders.new_run_folder(config, "run", "magrpo") == run


def test_a_second_run_on_a_policy_checkpoint_dir_with_snapshots_is_refused(tmp_path):
    snapshots = tmp_path / "snapshots"
    config = load_config(None, [f"output.base_dir={tmp_path}", f"madpo_iter.policy_checkpoint_dir={snapshots}"])
    assert run_folders.new_run_folder(config, "first", "madpo_iter", config.madpo_iter) == tmp_path / "first"
    (snapshots / "initial" / "agent_0").mkdir(parents=True)   # what the first run saved
    for trainer in ("madpo_iter", "marlhf_iter"):
        config = load_config(None, [f"output.base_dir={tmp_path}", f"{trainer}.policy_checkpoint_dir={snapshots}"])
        with pytest.raises(ConfigError, match=rf"{trainer}.policy_checkpoint_dir: {snapshots} holds an earlier "
                                              r"run's policy snapshots \(initial\)"):
            run_folders.new_run_folder(config, "second", trainer, Run.of(config, trainer).section)
    assert not (tmp_path / "second").exists()
    # another trainer's section is not this run's: not looked at
    config = load_config(None, [f"output.base_dir={tmp_path}", f"madpo_iter.policy_checkpoint_dir={snapshots}"])
    assert run_folders.new_run_folder(config, "third", "madpo", config.madpo) == tmp_path / "third"


def test_a_policy_checkpoint_dir_under_a_file_is_refused_by_the_output_check(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    config = load_config(None, [f"output.base_dir={tmp_path}", f"marlhf_iter.policy_checkpoint_dir={blocker / 's'}"])
    with pytest.raises(ConfigError, match=rf"marlhf_iter.policy_checkpoint_dir: {blocker} is a file"):
        run_folders.check_output(config, "marlhf_iter", config.marlhf_iter)
    run_folders.check_output(config, "magrpo", config.magrpo)   # not this trainer's key


def test_a_resume_that_changes_an_agent_s_own_setting_is_refused_naming_it(tmp_path):
    run = fake_run(tmp_path / "run", "magrpo", "agents=[planner/model, {name: coder/model, temperature: 0.2}]")
    resumed = [f"output.base_dir={tmp_path}", "output.run_name=run", "checkpoint.resume_from_checkpoint=latest"]
    run_folders.check_resumed_settings(run, load_config(run / "config.yaml", resumed), "magrpo")   # unchanged: fine
    for agents, said in (("[planner/model, {name: coder/model, temperature: 0.9}]",
                          r"agents\[1\]\.temperature 0\.2 -> 0\.9"),
                         ("[planner/model, {name: coder/model, temperature: 0.2, learning_rate: 1e-3}]",
                          r"agents\[1\]\.learning_rate None -> 0\.001"),
                         ("[{top_k: 5}, {name: coder/model, temperature: 0.2}]", r"agents\[0\] 'planner/model' -> "),
                         ("[planner/model, coder/model]", r"agents\[1\] \{.*'temperature': 0\.2.*\} -> 'coder/model'")):
        config = load_config(run / "config.yaml", [*resumed, f"agents={agents}"])
        with pytest.raises(ConfigError, match=rf"resuming .*: {said}.* would change what the run was trained with"
                                              r".*agent_model.init_from=\S+ agents=\.\.\."):
            run_folders.check_resumed_settings(run, config, "magrpo")
