"""The benchmark report: targets, verdicts, and runs saved under the older simulation key names."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("benchmark_report", ROOT / "benchmarks" / "report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def test_simulate_vs_apply_is_a_like_for_like_ratio_with_target_30():
    comparison, bound, meaning = report.TARGETS["simulate_vs_apply"]
    assert (comparison, bound) == (">=", 30)
    assert "journal lines/s ÷" in meaning and meaning.count("journal lines/s") == 2
    assert report.met("simulate_vs_apply", 35.5) is True
    assert report.met("simulate_vs_apply", 29.9) is False
    assert report.met("simulate_steps_vs_apply_lines", 11.5) is None  # shown, no target


def test_runs_saved_before_the_rename_are_read_under_todays_names():
    old = {"simulate_vs_apply": 11.4, "simulate_lines_vs_apply": 35.0, "fsync_ms": 0.36}
    assert report.normalized(old) == {"simulate_steps_vs_apply_lines": 11.4, "simulate_vs_apply": 35.0,
                                      "fsync_ms": 0.36}
    oldest = {"simulate_vs_apply": 2.73}  # before the like-for-like figure existed
    assert report.normalized(oldest) == {"simulate_steps_vs_apply_lines": 2.73, "simulate_vs_apply": None}
    new = {"simulate_vs_apply": 35.5, "simulate_vs_apply_unit": "journal lines", "simulate_steps_vs_apply_lines": 11.5}
    assert report.normalized(new) == new
    assert report.normalized({"fsync_ms": 1.0}) == {"fsync_ms": 1.0}


def test_the_table_of_saved_runs_marks_each_target(tmp_path, capsys):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps({"simulate_vs_apply": 11.4, "simulate_lines_vs_apply": 31.0, "cpu_per_op_vs_raw": 4.2}))
    new.write_text(json.dumps({"simulate_vs_apply": 35.5, "simulate_vs_apply_unit": "journal lines",
                               "simulate_steps_vs_apply_lines": 11.5, "cpu_per_op_vs_raw": 3.9}))
    assert report.print_table([old, new]) == 0
    rows = {line.split(" | ")[0]: line for line in capsys.readouterr().out.splitlines()}
    simulate = next(row for key, row in rows.items() if key.startswith("| `simulate_vs_apply`"))
    assert "| 31.0 ✓ | 35.5 ✓ | ≥ 30 |" in simulate
    cpu = next(row for key, row in rows.items() if key.startswith("| `cpu_per_op_vs_raw`"))
    assert "| 4.20 ✗ | 3.90 ✗ | ≤ 3 |" in cpu
    assert rows["| `simulate_steps_vs_apply_lines`"].endswith("| 11.4 | 11.5 | — |")


def test_frontier_vs_simulate_has_target_10_per_cpu_second():
    comparison, bound, meaning = report.TARGETS["frontier_vs_simulate"]
    assert (comparison, bound) == (">=", 10) and "CPU second" in meaning
    assert report.met("frontier_vs_simulate", 15.2) is True and report.met("frontier_vs_simulate", 9.9) is False


def test_every_target_but_the_plain_values_is_a_ratio_of_one_run():
    """A ratio's key names what it divides (``_vs_``, ``_ratio``, ``_speedup``); the plain values are
    the two the README names as such."""
    ratios = [key for key in report.TARGETS if key not in report.PLAIN_VALUES]
    assert all(("_vs_" in key or key.startswith("vs_") or "ratio" in key or key.endswith("_speedup"))
               for key in ratios), ratios
    assert set(report.PLAIN_VALUES) <= set(report.TARGETS)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Performance", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{key}`" in section.split("| figure |", 1)[0] for key in report.PLAIN_VALUES)


def test_the_readme_table_lists_every_target_with_its_bound():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Performance", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    for key, (comparison, bound, _) in report.TARGETS.items():
        row = next((line for line in rows if line.startswith(f"| `{key}`")), None)
        assert row is not None, key
        assert row.endswith(f"| {'≥' if comparison == '>=' else '≤'} {bound:g} |"), row


def test_a_table_of_a_missing_or_broken_run_file_is_a_one_line_error(tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for path in (tmp_path / "missing.json", broken):
        assert report.print_table([path]) == 2
        assert capsys.readouterr().err.startswith(f"error: {path}: not a saved run (")


def test_a_missing_dir_folder_is_a_usage_error_before_anything_runs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--dir", str(tmp_path / "absent")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == f"python -m benchmarks: error: --dir {tmp_path / 'absent'}: no such folder"
    assert not (tmp_path / "absent").exists()
