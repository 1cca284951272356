"""Tests of demo."""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys

import pytest

from ledger import Case, LedgerError, verify_case
from ledger.ground.errors import (INVALID_ARGUMENT)
from conftest import run_cli


def test_a_demo_removes_dead_build_folders_of_any_name_and_keeps_live_ones(tmp_path):
    import os
    from ledger import run_demo
    dead = tmp_path / ".ledger-demo-building-other.name.999999999"
    live = tmp_path / f".ledger-demo-building-third.{os.getpid()}"
    dead.mkdir()
    live.mkdir()
    path, _, verified = run_demo(tmp_path / "mine", echo=lambda line: None)
    assert path == tmp_path / "mine" and verified.events > 0
    assert not dead.exists() and live.exists()


# --- found by the new-user walkthrough ---------------------------------------------------------
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_a_demo_whose_reader_goes_away_still_completes_and_a_taken_folder_is_refused(tmp_path):
    target = tmp_path / "demo"
    reader = subprocess.Popen([sys.executable, "-m", "ledger_cli", "demo", str(target)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader.stdout.readline()
    reader.stdout.close()  # like `ledger demo | head -1`
    reader.wait(timeout=300)
    assert b"Traceback" not in reader.stderr.read()
    assert verify_case(target).head_seq == 56
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".demo.building")]
    again = run_cli("demo", str(target))
    assert again.returncode == 1 and b"error: CASE_EXISTS: " in again.stderr


# --- found by the fourth break-it round ------------------------------------------------------
@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_demo_refuses_a_symlink_and_configs_records_the_actor_and_removes_builds_of_killed_demos(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    linked = run_cli("demo", str(tmp_path / "link"))
    assert linked.returncode == 1 and b"error: INVALID_ARGUMENT: " in linked.stderr and linked.stdout == b""
    cheap = tmp_path / "cheap.toml"
    cheap.write_text("default_action_cost = 1\n", encoding="utf-8")
    assert run_cli("--config", str(cheap), "demo", str(tmp_path / "d0")).returncode == 2
    (tmp_path / "bad.toml").write_text("x = 1\n", encoding="utf-8")  # the usage is refused whatever the file holds
    for option in ("--config", "--analysis-config"):
        refused = run_cli(option, str(tmp_path / "bad.toml"), "demo", str(tmp_path / "d0"))
        assert refused.returncode == 2 and refused.stderr.decode().endswith(
            "Error: demo always runs the bundled example policy; leave out --config and --analysis-config\n")
    assert not (tmp_path / "d0").exists()
    abandoned = tmp_path / ".ledger-demo-building-d1.999999999"  # a pid that cannot exist
    abandoned.mkdir()
    done = run_cli("--actor", "bob", "demo", str(tmp_path / "d1"))
    assert done.returncode == 0, done.stderr
    assert not abandoned.exists()
    with Case.open(tmp_path / "d1") as case:
        actors = {json.loads(row["body"])["actor"] for row in case.events(0, with_body=True)}
    assert actors == {"bob"}


def test_a_demo_that_cannot_be_built_names_the_folder_given_not_its_hidden_build_folder(tmp_path):
    from ledger import run_demo

    (tmp_path / "a-file").write_text("not a folder")
    target = tmp_path / "a-file" / "demo"
    with pytest.raises(LedgerError) as refused:
        run_demo(target, echo=lambda text: None)
    assert (refused.value.code, refused.value.message) == (
        INVALID_ARGUMENT, f"cannot create a case at {target}: Not a directory ({target})")


@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_a_demo_goes_into_any_folder_name_the_file_system_takes(tmp_path):
    """Its hidden build folder keeps 40 characters of the name, so a long name (here 240 bytes, 255
    is the limit) does not become one too long to create."""
    from ledger import run_demo

    for name in ("d" * 240, "é" * 120):
        path, _, verified = run_demo(tmp_path / name, echo=lambda text: None)
        assert (path.name, verified.events) == (name, 56)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["d" * 240, "é" * 120])


def test_a_temp_folder_inside_the_demo_folder_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    import tempfile

    from ledger import run_demo

    target = tmp_path / "demo"
    target.mkdir()  # an empty folder made for the demo, and the temp folder too
    monkeypatch.setattr(tempfile, "tempdir", str(target))
    with pytest.raises(LedgerError) as caught:
        run_demo(target, echo=lambda line: None)
    assert caught.value.code == INVALID_ARGUMENT and "TMPDIR" in caught.value.message
    assert "the demo" in caught.value.message
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["demo"]


@pytest.mark.parametrize("name", [".", "", "{cwd}"])
def test_the_current_folder_is_refused_as_the_demo_folder_before_anything_is_done(tmp_path, name):
    """The demo is built beside its folder and renamed onto it: into the current folder it ran every
    step, printed them, then failed (STORAGE_ERROR, device or resource busy)."""
    here = tmp_path / "here"
    here.mkdir()
    done = run_cli("demo", name.format(cwd=here), cwd=here)
    assert (done.returncode, done.stdout, done.stderr.decode()) == (1, b"", (
        f"error: INVALID_ARGUMENT: {'.' if name != '{cwd}' else here} is the current folder, which the demo cannot "
        "replace with the case it builds; run it from the parent folder (ledger demo NAME)\n"))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["here"]


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_demo_runs_into_an_empty_folder_from_a_current_folder_that_was_removed(tmp_path):
    gone, target = tmp_path / "gone", tmp_path / "empty"
    gone.mkdir()
    target.mkdir()
    done = subprocess.run(f"cd {gone} && rmdir {gone} && {sys.executable} -m ledger_cli demo {target}", shell=True,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if os.path.isabs(p))})
    assert done.returncode == 0, done.stderr
    assert verify_case(target).events > 0


def test_a_demo_interrupted_once_its_case_is_in_place_says_where_the_complete_case_is(tmp_path, monkeypatch):
    """Interrupted while verifying, the demo said to run it again, which was then refused (CASE_EXISTS)."""
    from ledger.package_tools import demo as demo_module

    def interrupted(path, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo_module, "verify_case", interrupted)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        demo_module.run_demo(tmp_path / "d", echo=said.append)
    target = tmp_path / "d"
    assert said[-1] == f"interrupted: the demo case is complete at {target}; 'ledger verify {target}' checks it"
    monkeypatch.undo()
    assert verify_case(target).events > 0


def test_a_ctrl_c_as_the_demo_case_is_renamed_into_place_still_says_where_the_case_is(tmp_path, monkeypatch):
    """A Ctrl-C just after the rename that puts the case in place, before the demo noted it, said
    that nothing half-written remained and to run the command again, which CASE_EXISTS then refused."""
    import signal

    from ledger.package_tools import demo as demo_module

    renamed = os.rename

    def rename_then_ctrl_c(source, target):
        renamed(source, target)
        if Path(target).name == "d":
            os.kill(os.getpid(), signal.SIGINT)  # Python's own handler: a KeyboardInterrupt at once

    monkeypatch.setattr(demo_module.os, "rename", rename_then_ctrl_c)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        demo_module.run_demo(tmp_path / "d", echo=said.append)
    monkeypatch.undo()
    target = tmp_path / "d"
    assert said[-1] == f"interrupted: the demo case is complete at {target}; 'ledger verify {target}' checks it"
    assert verify_case(target).events > 0


_CTRL_C_AT_RENAME = """
import os, signal, sys
from ledger.package_tools import demo
renamed, number = os.rename, getattr(signal, sys.argv[1])
def rename_then_signal(source, target):
    renamed(source, target)
    if os.path.basename(str(target)) == "d":
        os.kill(os.getpid(), number)
demo.os.rename = rename_then_signal
from ledger_cli.entry import run
sys.argv = ["ledger", "demo", "d"]
run()
"""


@pytest.mark.parametrize("signal_name, status", [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.slow  # over 0.4 s in the default run: the slow lane (.ci/run) runs it
def test_the_demo_command_interrupted_once_its_case_is_in_place_says_so_not_to_run_it_again(tmp_path, signal_name,
                                                                                             status):
    """Its last line said nothing half-written remained and to run the command again, which was then
    refused: the complete case was in the folder."""
    done = subprocess.run([sys.executable, "-c", _CTRL_C_AT_RENAME, signal_name], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == status, done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        "error: interrupted once the demo case was complete at d; '") and "verify d' checks it" in done.stderr
    assert "run the command again" not in done.stderr and verify_case(tmp_path / "d").events > 0


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_the_demo_inputs_are_made_with_the_modes_the_umask_gives_as_every_other_file(tmp_path):
    """Under umask 077 the copied sources and database kept the installed example's 755/644: readable by all."""
    done = subprocess.run([sys.executable, "-m", "ledger_cli", "demo", str(tmp_path / "d")], capture_output=True,
                          timeout=300, preexec_fn=lambda: os.umask(0o077))
    assert done.returncode == 0, done.stderr
    modes = {path.relative_to(tmp_path / "d").as_posix(): path.stat().st_mode & 0o777
             for inputs in ("sources", "data") for path in [tmp_path / "d" / inputs, *(tmp_path / "d" / inputs).rglob("*")]}
    assert modes and all(mode == (0o700 if (tmp_path / "d" / name).is_dir() else 0o600) for name, mode in modes.items()), modes
    assert (tmp_path / "d" / "ledger.sqlite").stat().st_mode & 0o777 == 0o600


def test_the_demo_names_the_installed_example_policy_file_which_loads_as_the_policy_it_used(tmp_path):
    """After a plain ``pip install`` there is no ``config/`` folder at hand: the demo's banner names the
    file it read, one ``--config`` takes, whose costs are the ones the banner shows."""
    import re

    from ledger import BudgetConfig, run_demo

    said: list[str] = []
    run_demo(tmp_path / "d", echo=said.append)
    banner = next(line for line in said if line.startswith("policy: "))
    found = re.fullmatch(r"policy: the example policy shipped with case-ledger \((/.+\.toml), for --config; "
                         r"costs (\{.*\}), max_reward_bps (\d+)\)\n", banner)
    assert found is not None, banner
    policy = BudgetConfig.load(Path(found[1]))
    assert (str(dict(policy["action_costs"])), policy["max_reward_bps"]) == (found[2], int(found[3]))
