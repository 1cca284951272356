"""Regression tests for break-it findings on input checking, apply summaries and documentation (round B)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import Case, LedgerError, read_only_query, read_only_rows
from ledger.errors import INVALID_ARGUMENT, NOT_INITIALIZED
from ledger_cli.main import main as cli_main

from conftest import EXAMPLE_BUDGET

TRAJECTORIES = Path(__file__).parent / "data" / "trajectories"


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli_main, [str(a) for a in args], input=stdin)
    return done.exit_code, done.stdout, done.stderr


# 1. numbers: NaN, infinity and negative values are refused, never a traceback

@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "-1", "0", "1e9"])
def test_sql_timeout_that_is_not_a_finite_number_in_range_is_a_usage_error(case, value):
    code, out, err = cli("sql", case.path, "select 1", "--timeout", value)
    assert (code, out) == (2, "")
    assert "--timeout" in err and "Traceback" not in err


def test_sql_timeout_in_range_still_runs(case):
    assert cli("sql", case.path, "select 7 AS x", "--timeout", "0.5", "--json")[:2] == (0, '[{"x":7}]\n')


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -5, 0, True, 1.5, "30", 86_400_001])
def test_read_only_query_timeout_must_be_a_positive_integer_of_milliseconds(case, timeout):
    with pytest.raises(LedgerError) as caught:
        read_only_query(case.path, "select 1", timeout_ms=timeout)
    assert caught.value.code == INVALID_ARGUMENT and "timeout_ms" in caught.value.message
    with pytest.raises(LedgerError) as caught:
        with read_only_rows(case.path, "select 1", timeout_ms=timeout):
            pass
    assert caught.value.code == INVALID_ARGUMENT


def test_read_only_query_sql_must_be_a_string(case):
    with pytest.raises(LedgerError) as caught:
        read_only_query(case.path, b"select 1")
    assert caught.value.code == INVALID_ARGUMENT
    assert read_only_query(case.path, "select 2 AS y", timeout_ms=1000) == (["y"], [(2,)])


# 3. a KEY=VALUE option repeated with the same key is a usage error naming the key

@pytest.mark.parametrize("option", ["--limit", "--delegate-limit"])
def test_a_repeated_limit_dimension_is_a_usage_error_naming_it(case, option):
    extra = ["--delegate", "agent"] if option == "--delegate-limit" else []
    args = ["scope", "establish", case.path, "case", "--limit", "units=9", *extra,
            option, "units=5", option, "units=6"]
    code, out, err = cli(*args)
    assert (code, out) == (2, "")
    assert "'units' is given twice" in err
    assert [e["type"] for e in case.events()][-1] == "case.transitioned"  # nothing written


def test_a_repeated_vary_key_is_a_usage_error_naming_it(tmp_path):
    code, out, err = cli("simulate", TRAJECTORIES, "--vary", "max_low_information_steps=2",
                         "--vary", "max_low_information_steps=3", "--jobs", "1")
    assert (code, out) == (2, "")
    assert "max_low_information_steps is given twice" in err


def test_vary_refuses_a_key_given_twice_in_the_api():
    from ledger import example_policy, vary
    with pytest.raises(LedgerError) as caught:
        vary(example_policy(), [("max_low_information_steps", [2]), ("max_low_information_steps", [3])])
    assert caught.value.code == INVALID_ARGUMENT and caught.value.details["key"] == "max_low_information_steps"
    assert [p.name for p in vary(example_policy(), [("max_low_information_steps", [2, 3])])] == [
        "max_low_information_steps=2", "max_low_information_steps=3"]


def test_two_policies_with_one_name_are_a_usage_error(tmp_path):
    code, out, err = cli("simulate", TRAJECTORIES, "--policy", f"a={EXAMPLE_BUDGET}", "--policy",
                         f"a={EXAMPLE_BUDGET}", "--jobs", "1")
    assert (code, out) == (2, "")
    assert "two policies are named 'a'" in err


# 4. budget snapshot before initialize

def test_budget_snapshot_before_initialize_is_not_initialized(case):
    with pytest.raises(LedgerError) as caught:
        case.budget().snapshot()
    assert caught.value.code == NOT_INITIALIZED
    code, out, err = cli("budget", "snapshot", case.path)
    assert (code, out) == (1, "")
    assert err.startswith("error: NOT_INITIALIZED: revision 1 has no budget yet")


def test_budget_snapshot_before_any_revision_is_not_initialized(package):
    Case.create(package, case_id="BUG-1").close()
    code, out, err = cli("budget", "snapshot", package)
    assert (code, err) == (1, "error: NOT_INITIALIZED: no revision is open yet; open one, then run initialize\n")


def test_budget_snapshot_after_initialize_still_reports(budget):
    assert budget.snapshot().revision == 1 and budget.snapshot().seq == 4


# 2. the apply summary counts committed lines even when their result lines cannot be printed

def _snapshot_journal(path: Path, snapshots: int) -> Path:
    lines = [{"op": "open_revision", "hypotheses": [{"statement": "a"}], "units_per_hypothesis": 40},
             {"op": "transition", "to": "INVESTIGATING_HYPOTHESES"}, {"op": "initialize"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines + [{"op": "snapshot"}] * snapshots))
    return path


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("batch_size, ok", [(100, 49), (10, 10)])
def test_apply_into_a_full_output_counts_what_committed(tmp_path, batch_size, ok):
    journal = _snapshot_journal(tmp_path / "j.jsonl", 46)
    with open("/dev/full", "wb") as full:
        done = subprocess.run([sys.executable, "-m", "ledger_cli", "apply", str(tmp_path / "c"), str(journal),
                               "--create", "C", "--batch-size", str(batch_size)],
                              stdout=full, stderr=subprocess.PIPE, timeout=120)
    err = done.stderr.decode()
    assert done.returncode == 1
    assert f"applied: {ok} ok ({ok - 3} reused), 0 failed" in err
    assert f"{ok} of them not printed (standard output failed; no further line was applied)" in err
    assert "error: OUTPUT_ERROR: cannot print the result" in err
    with Case.open(tmp_path / "c") as case:
        assert len(case.events()) == 4  # created, revision, transition, initialize: nothing past the batch


def test_apply_into_a_pipe_closed_early_counts_what_committed(tmp_path):
    journal = _snapshot_journal(tmp_path / "j.jsonl", 5000)
    reader = subprocess.Popen(["head", "-c", "10"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    done = subprocess.run([sys.executable, "-m", "ledger_cli", "apply", str(tmp_path / "c"), str(journal),
                           "--create", "C", "--batch-size", "5003"],
                          stdout=reader.stdin, stderr=subprocess.PIPE, timeout=120)
    reader.stdin.close()
    reader.wait()
    err = done.stderr.decode()
    assert done.returncode == 1 and "Traceback" not in err
    assert "applied: 5003 ok (5000 reused), 0 failed" in err
    printed = 5003 - int(err.split("applied: 5003 ok (5000 reused), 0 failed, no time raised, ")[1].split(", ")[1].split()[0])
    assert 0 < printed < 5003


# 6. the public API refuses arguments of the wrong type with INVALID_ARGUMENT

def _api_calls(case: Case, tmp_path: Path) -> dict[str, object]:
    import ledger as L
    journal = _snapshot_journal(tmp_path / "j.jsonl", 1)
    return {
        "apply_journal(None)": lambda: list(L.apply_journal(None, [])),
        "apply_journal(str lines)": lambda: list(L.apply_journal(case, '{"op": "snapshot"}')),
        "apply_journal(bytes lines)": lambda: list(L.apply_journal(case, b'{"op": "snapshot"}')),
        "apply_journal(int lines)": lambda: list(L.apply_journal(case, 5)),
        "apply_journal(keep_going=1)": lambda: list(L.apply_journal(case, [], keep_going="yes")),
        "apply_journal(on_commit=5)": lambda: list(L.apply_journal(case, [], on_commit=5)),
        "apply_journal(budget=str)": lambda: list(L.apply_journal(case, [], budget="policy.toml")),
        "simulate(int journals)": lambda: L.simulate(5),
        "simulate(list of ints)": lambda: L.simulate([5]),
        "simulate(outcomes with None)": lambda: L.simulate([journal], outcomes={"x": 5, "y": None}, jobs=1),
        "simulate(outcomes=5)": lambda: L.simulate([journal], outcomes=5, jobs=1),
        "simulate(policies=str)": lambda: L.simulate([journal], policies=5, jobs=1),
        "simulate(analysis=dict)": lambda: L.simulate([journal], analysis={}, jobs=1),
        "simulate(package=5)": lambda: L.simulate([journal], package=5, jobs=1),
        "export_case(progress=5)": lambda: L.export_case(case, progress=5),
        "export_case(None)": lambda: L.export_case(None),
        "export_count(str)": lambda: L.export_count(str(case.path)),
        "verify_case(5)": lambda: L.verify_case(5),
        "verify_case(progress=5)": lambda: L.verify_case(case.path, progress=5),
        "import_tree(5)": lambda: L.import_tree(5),
        "import_tree(progress=5)": lambda: L.import_tree(case.path, tmp_path / "x", progress="x"),
        "read_manifest(5)": lambda: L.read_manifest(5),
        "run_demo(echo=5)": lambda: L.run_demo(tmp_path / "demo", echo=5),
        "run_demo(target=5)": lambda: L.run_demo(5),
        "load_policy(5)": lambda: L.load_policy(5),
        "parse_vary(5)": lambda: L.parse_vary(5),
        "vary(base=str)": lambda: L.vary("example", []),
        "vary(grid=str)": lambda: L.vary(L.example_policy(), "max_low_information_steps=2"),
        "read_outcomes(5)": lambda: L.read_outcomes(5),
        "open_for_journal(5)": lambda: L.open_for_journal(5),
        "read_lines(str)": lambda: list(L.read_lines("journal.jsonl")),
        "journal_first_at(str)": lambda: L.journal_first_at('{"at": "2026-01-01T00:00:00Z"}'),
        "tradeoff_points(str)": lambda: L.tradeoff_points("x"),
        "read_only_query(None)": lambda: L.read_only_query(None, "select 1"),
        "Case.open(5)": lambda: L.Case.open(5),
        "read_lines(text stream)": lambda: list(L.read_lines(open(journal, encoding="utf-8"))),
        "run_demo(actor=5)": lambda: L.run_demo(tmp_path / "demo", actor=5),
        "simulate(policies=[5])": lambda: L.simulate([journal], policies=[5], jobs=1),
    }



@pytest.fixture
def api_calls(case, tmp_path):
    return _api_calls(case, tmp_path)


@pytest.mark.parametrize("call", [
    "apply_journal(None)", "apply_journal(str lines)", "apply_journal(bytes lines)", "apply_journal(int lines)",
    "apply_journal(keep_going=1)", "apply_journal(on_commit=5)", "apply_journal(budget=str)",
    "simulate(int journals)", "simulate(list of ints)", "simulate(outcomes with None)", "simulate(outcomes=5)",
    "simulate(policies=str)", "simulate(analysis=dict)", "simulate(package=5)", "export_case(progress=5)",
    "export_case(None)", "export_count(str)", "verify_case(5)", "verify_case(progress=5)", "import_tree(5)",
    "import_tree(progress=5)", "read_manifest(5)", "run_demo(echo=5)", "run_demo(target=5)", "load_policy(5)",
    "parse_vary(5)", "vary(base=str)", "vary(grid=str)", "read_outcomes(5)", "open_for_journal(5)",
    "read_lines(str)", "journal_first_at(str)", "tradeoff_points(str)", "read_only_query(None)", "Case.open(5)",
    "read_lines(text stream)", "run_demo(actor=5)", "simulate(policies=[5])"])
def test_a_public_function_given_a_wrong_type_raises_invalid_argument(api_calls, call):
    with pytest.raises(LedgerError) as caught:
        api_calls[call]()
    assert caught.value.code == INVALID_ARGUMENT, caught.value.message
    assert "must be" in caught.value.message or "must hold" in caught.value.message or "must map" in caught.value.message


def test_parse_json_of_something_that_is_not_text_is_invalid_json():
    from ledger import parse_json
    with pytest.raises(LedgerError) as caught:
        parse_json(5)
    assert caught.value.code == "INVALID_JSON"


def test_simulate_accepts_one_journal_path_as_a_str_and_a_path():
    from ledger import simulate
    one = TRAJECTORIES / "django__django-11206.jsonl"
    for given in (str(one), one, [str(one)]):
        report = simulate(given, jobs=1)
        assert [result.run for result in report.runs] == ["django__django-11206"]


def test_simulate_outcomes_must_map_text_to_text():
    from ledger import simulate
    one = TRAJECTORIES / "django__django-11206.jsonl"
    with pytest.raises(LedgerError) as caught:
        simulate([one], outcomes={"django__django-11206": None}, jobs=1)
    assert caught.value.code == INVALID_ARGUMENT and "must map run ids" in caught.value.message
    report = simulate([one], outcomes={"django__django-11206": "resolved"}, jobs=1)
    assert list(report.policies[0]["by_outcome"]) == ["resolved"]


# 7. minor input: BOM, invisible reasons, config folders, control characters in paths, FIFOs

def test_a_journal_may_start_with_a_utf8_bom_like_an_evidence_file(tmp_path):
    journal = _snapshot_journal(tmp_path / "j.jsonl", 1)
    journal.write_bytes(b"\xef\xbb\xbf" + journal.read_bytes())
    code, out, err = cli("apply", tmp_path / "c", journal, "--create", "C")
    assert code == 0 and [json.loads(line)["ok"] for line in out.splitlines()] == [True] * 4
    from ledger import journal_first_at, simulate
    assert journal_first_at(['\ufeff{"at": "2026-01-02T00:00:00Z"}']) == "2026-01-02T00:00:00.000000Z"
    assert simulate(journal, jobs=1).errors == []


def test_a_bom_after_the_first_line_is_still_invalid_json(case):
    from ledger import apply_journal
    results = list(apply_journal(case, ['{"op": "snapshot"}', '\ufeff{"op": "snapshot"}'], keep_going=True))
    assert results[1].error.code == "INVALID_JSON"


@pytest.mark.parametrize("reason", ["\u200b", " \u200b\u2060 ", "\u00a0", "\x07", "\ufeff"])
def test_a_reason_of_only_invisible_characters_is_reason_required(budget, reason):
    with pytest.raises(LedgerError) as caught:
        budget.reject("H1", reason)
    assert caught.value.code == "REASON_REQUIRED"
    assert budget.reject("H1", "\u200bvisible").state["H1"]["status"] == "rejected"


def test_a_statement_of_only_invisible_characters_is_refused(case):
    with pytest.raises(LedgerError) as caught:
        case.open_revision([{"statement": "\u200b\u200d"}])
    assert caught.value.code == INVALID_ARGUMENT and "non-blank" in caught.value.message


@pytest.mark.parametrize("option", ["--config", "--analysis-config"])
def test_a_config_that_is_a_folder_or_missing_is_config_invalid_exit_1(case, tmp_path, option):
    for path, says in ((tmp_path, "not a regular file"), (tmp_path / "missing.toml", "no such file")):
        code, out, err = cli(option, path, "balances", case.path)
        assert (code, out) == (1, "") and err == f"error: CONFIG_INVALID: {path}: {says}\n"


def test_a_path_with_a_newline_is_shown_escaped_on_one_line(tmp_path):
    target = tmp_path / "nl\ncase"
    code, out, _ = cli("init", target, "--case-id", "NL")
    assert code == 0 and out.count("\n") == 1 and f"at {tmp_path}/nl\\ncase (package" in out
    code, _, err = cli("init", target, "--case-id", "NL")
    assert (code, err) == (1, f"error: CASE_EXISTS: {tmp_path}/nl\\ncase already holds a case ledger\n")


def test_an_evidence_file_that_is_a_fifo_or_folder_is_refused_without_blocking(budget, case, tmp_path):
    import os
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        code, out, err = cli("budget", "record", case.path, "H1", "q1", "--evidence-file", path)
        assert (code, out) == (2, "") and "is not a regular file" in err
    code, out, err = cli("evidence", "store", case.path, fifo, fifo, "--iteration", "i1")
    assert code == 2 and "is not a regular file" in err


# 5. derived numbers beyond 2**53 - 1

HUGE = 2**53 - 1


def _huge_case(package: Path) -> Case:
    from ledger import BudgetConfig
    case = Case.create(package, case_id="BIG")
    case.open_revision([{"statement": "a"}, {"statement": "b"}], HUGE)
    case.transition("INVESTIGATING_HYPOTHESES")
    policy = BudgetConfig.from_mapping({**BudgetConfig.load(EXAMPLE_BUDGET).policy, "action_costs": {},
                                        "default_action_cost": HUGE - 1})
    budget = case.budget(policy)
    budget.initialize()
    budget.reserve("H1", "q1", "x.y")
    budget.reserve("H2", "q2", "x.y")
    return case


def test_a_scope_whose_summed_consumption_passes_2_53_is_limit_reached_naming_it(package):
    case = _huge_case(package)
    before = len(case.events())
    with pytest.raises(LedgerError) as caught:
        case.scopes().establish("case", {"units": 5}, "controller")
    assert caught.value.code == "LIMIT_REACHED"
    assert caught.value.details == {"scope": "case", "dimension": "units"}
    assert "units consumed in scope case would be 18014398509481980" in caught.value.message
    assert len(case.events()) == before
    # a dimension without a limit is not summed into any event
    assert case.scopes().establish("revision:1", {"actions": 5}, "controller").usage[0]["consumed"] == 2
    code, _, err = cli("scope", "establish", case.path, "case", "--limit", "units=5")
    assert code == 1 and err.startswith("error: LIMIT_REACHED: units consumed in scope case")
    case.close()


def test_the_advisory_price_is_clamped_at_2_53_minus_1(package):
    case = _huge_case(package)
    code, out, _ = cli("budget", "price", case.path, "H1", "x.y", "--json")
    assert code == 0 and json.loads(out) == {"cost": HUGE - 1, "resource_cost": HUGE, "scarcity_bps": 40000}
    from ledger.rules.scopes import resource_cost
    assert (resource_cost(HUGE - 1, 40000), resource_cost(10, 13000)) == (HUGE, 13)
    case.close()


# 8. docs accuracy and the checks they describe

REPO = Path(__file__).resolve().parent.parent


def test_the_docs_commands_use_paths_a_fresh_clone_has():
    for page in ("docs/simulate.md", "docs/journals.md"):
        text = (REPO / page).read_text(encoding="utf-8")
        assert "../shared" not in text, page
        assert "tests/data/trajectories/" in text, page
    assert "--plot docs/" not in (REPO / "docs/simulate.md").read_text(encoding="utf-8")
    assert (TRAJECTORIES / "outcomes.csv").is_file() and len(list(TRAJECTORIES.glob("*.jsonl"))) == 100


def test_init_at_is_in_the_readme_command_table():
    assert "| `ledger init CASE --case-id ID [--at T]` |" in (REPO / "README.md").read_text(encoding="utf-8")


def test_the_text_limit_and_sql_json_encodings_are_documented():
    concepts = (REPO / "docs/concepts.md").read_text(encoding="utf-8")
    errors = (REPO / "docs/errors.md").read_text(encoding="utf-8")
    files = (REPO / "docs/files.md").read_text(encoding="utf-8")
    assert "at most 4000 characters" in concepts and "over 4000 characters" in errors
    assert '{"$base64": "<standard base64 of its bytes>"}' in files and '`"-Infinity"`' in files


def test_text_limit_4000_characters_as_documented(budget):
    assert budget.reject("H1", "r" * 4000).state["H1"]["status"] == "rejected"
    with pytest.raises(LedgerError) as caught:
        budget.reject("H2", "r" * 4001)
    assert caught.value.code == INVALID_ARGUMENT


def test_the_sql_docs_say_what_sqlite_reports_for_view_column_types(budget, case):
    columns, rows = read_only_query(case.path, "SELECT name, type FROM pragma_table_info('balances')")
    empty = [name for name, declared in rows if declared == ""]
    text = (REPO / "docs/sql.md").read_text(encoding="utf-8")
    assert "Every view column has a declared type" not in text
    if empty:  # computed columns have no declared type on this SQLite: the docs say so
        assert "shows an empty type for them" in text
    _, values = read_only_query(case.path, "SELECT DISTINCT typeof(spent_units), typeof(statement) FROM balances")
    assert values == [("integer", "text")]


def test_simulate_refuses_a_bad_per_run_or_plot_target_before_running(tmp_path, monkeypatch):
    import ledger.simulation as simulation
    ran = []
    monkeypatch.setattr(simulation, "journal_files", lambda paths: ran.append(paths) or [])
    code, _, err = cli("simulate", TRAJECTORIES, "--per-run", tmp_path / "missing" / "runs.jsonl")
    assert (code, err) == (1, f"error: INVALID_ARGUMENT: --per-run {tmp_path}/missing/runs.jsonl: the folder "
                              f"{tmp_path}/missing does not exist\n")
    code, _, err = cli("simulate", TRAJECTORIES, "--plot", tmp_path / "figure.pdf")
    assert code == 1 and "the file must end in .svg or .png" in err
    code, _, err = cli("simulate", TRAJECTORIES, "--plot", tmp_path)
    assert code == 2 and "is a directory" in err  # click refuses a folder itself (usage)
    assert ran == []  # nothing was simulated


def test_simulate_without_matplotlib_refuses_plot_before_running(tmp_path, monkeypatch):
    import importlib
    import ledger.simulation as simulation
    real = importlib.import_module

    def no_matplotlib(name, *args):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args)
    ran = []
    monkeypatch.setattr(importlib, "import_module", no_matplotlib)
    monkeypatch.setattr(simulation, "journal_files", lambda paths: ran.append(paths) or [])
    code, _, err = cli("simulate", TRAJECTORIES, "--plot", tmp_path / "figure.svg")
    assert (code, err) == (1, "error: INVALID_ARGUMENT: --plot needs matplotlib: pip install '.[plot]' (in a clone of "
                           "the repository)\n")
    assert ran == [] and not (tmp_path / "figure.svg").exists()


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


@pytest.mark.parametrize("args", [(5,), ("select 1", 5), ("select ?", {"a": 1}), ("select ?, ?", [1])])
def test_case_query_with_a_wrong_statement_type_or_parameters_is_invalid_argument(case, args):
    with pytest.raises(LedgerError) as caught:
        case.query(*args)
    assert caught.value.code == INVALID_ARGUMENT
    assert case.query("select :a AS a", {"a": 2}) == [{"a": 2}]
