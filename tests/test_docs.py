"""Docs that cannot drift: every command has help and is in the README; every code is documented."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner
import sqlite_utils
import pytest

from ledger.ground.errors import ALL_CODES, CLI_ONLY_CODES
from ledger_cli.main import main
from conftest import REPO, start_case
from ledger import Case, read_only_query
README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = REPO / "docs"


def doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def commands(group: click.Group, prefix: str = "ledger"):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the public way: the top group loads its commands on demand
        command = group.get_command(ctx, name)
        path = f"{prefix} {name}"
        yield path, command
        if isinstance(command, click.Group):
            yield from commands(command, path)


def test_every_cli_command_has_help_text_and_appears_in_the_readme():
    found = list(commands(main))
    assert len(found) >= 20
    for path, command in found:
        assert (command.help or "").strip(), f"{path} has no help text"
        if not isinstance(command, click.Group):
            assert f"`{path}" in README, f"{path} is not in the README"


def test_every_error_code_is_in_the_error_table_the_readme_links():
    assert "(docs/errors.md)" in README
    table = set(re.findall(r"^\| `([A-Z_]+)` \|", doc("errors.md"), flags=re.MULTILINE))
    assert set(ALL_CODES) <= table, sorted(set(ALL_CODES) - table)
    assert table <= set(ALL_CODES) | set(CLI_ONLY_CODES), sorted(table - set(ALL_CODES) - set(CLI_ONLY_CODES))
    assert set(CLI_ONLY_CODES) <= table


def test_every_public_view_and_its_columns_are_documented(case):
    db = sqlite_utils.Database(case.storage.conn, recursive_triggers=False, execute_plugins=False)
    views = set(db.view_names())
    assert {"balances", "actions", "evidence", "case_status", "scope_usage"} <= views
    for view in ("balances", "actions", "evidence", "case_status", "scope_usage"):
        assert f"`{view}`" in README, f"the README does not name the {view} view"
        section = doc("sql.md").split(f"### `{view}`", 1)[1].split("\n### ", 1)[0]
        for column in db[view].columns_dict:
            assert f"| `{column}` |" in section, f"{view}.{column} is not documented"


def test_the_readme_quick_start_has_exactly_two_commands():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert [b.strip().count("\n") for b in blocks] == [0, 0]
    assert "ledger demo" in blocks[0] and "pytest" in blocks[1]
    ci = (REPO / ".ci" / "run").read_text()
    assert "Quick start" in ci and 'bash -euo pipefail -c "$test_command"' in ci


def test_the_readme_python_example_is_the_shipped_investigator_and_runs_from_any_folder(tmp_path):
    import subprocess
    import sys

    section = README.split("## Python example", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL).group(1)
    assert code == (REPO / "ledger" / "examples" / "investigator.py").read_text(encoding="utf-8")
    assert "python -m ledger.examples.investigator" in section
    done = subprocess.run([sys.executable, "-m", "ledger.examples.investigator", str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed[-3:] == ["H1 abandoned_low_information_gain low_information_streak 5",
                            "H2 rejected its test passes: sell() charges the right price 29",
                            f"case folder: {tmp_path / 'BUG-20'}"]
    assert printed[0] == "H1-0: 40 units left before, score 90, information 90, now investigating"
    # past its plan the agent repeats itself: the duplicate scores 90 but informs 0, so H1 is abandoned
    assert printed[-4] == "H1-4: 15 units left before, score 90, information 0, now abandoned_low_information_gain"


def test_the_journal_docs_example_runs_as_is(tmp_path):
    from conftest import run_cli

    section = doc("journals.md")
    setup, journal = re.findall(r"```(?:sh)?\n(.*?)```", section, flags=re.DOTALL)[:2]
    assert "ledger apply c1 journal.jsonl --create C1" in setup
    (tmp_path / "c1" / "sources").mkdir(parents=True)
    (tmp_path / "c1" / "sources" / "app.py").write_text("def add(a, b):\n    return a - b\n", encoding="utf-8")
    (tmp_path / "journal.jsonl").write_text(journal, encoding="utf-8")
    done = run_cli("apply", "c1", "journal.jsonl", "--create", "C1", cwd=tmp_path)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    lines = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert len(lines) == len(journal.strip().splitlines()) == 10 and all(line["ok"] for line in lines)
    settled = lines[5]["result"]
    assert settled["action"]["reward_units"] == 4  # cost 10 (no --config: the default cost), information 50
    assert lines[-1]["result"]["state"]["H2"]["status"] == "rejected"


def test_the_readmes_example_questions_run_and_answer_on_the_demo_one_at_least_for_each_view(tmp_path):
    """Each example query of the README's SQL section runs through `ledger sql`'s read-only path."""
    from ledger import read_only_query, run_demo
    from ledger.storage.sqlfiles import PUBLIC_VIEWS

    block = README.split("Questions people ask first", 1)[1].split("```sql", 1)[1].split("```", 1)[0]
    queries = [q.strip() for q in re.split(r"^-- \d\. .*$", block, flags=re.MULTILINE) if q.strip()]
    assert len(queries) == 8
    assert {view for view in PUBLIC_VIEWS if view != "balances_recomputed"} <= {
        word for q in queries for word in re.findall(r"FROM (\w+)", q)}
    path, _, _ = run_demo(tmp_path / "d", echo=lambda text: None)
    answers = [read_only_query(path, q.rstrip(";")) for q in queries]
    spend, refunds, last_ten, abandoned, pending, evidence, _, status = (rows for _, rows in answers)
    assert [row[0] for row in evidence] == ["E000001", "E000002", "E000003"]
    assert status == [(answers[7][1][0][0], "EVALUATING", 1, 56, None)]  # the demo ends evaluating
    limited = start_case(tmp_path / "limited")
    limited.budget().initialize()
    limited.scopes().establish("case", {"units": 100, "actions": 4}, "controller")
    limited.budget().reserve("H1", "a1", "source.read_context")
    limited.close()
    _, tightest = read_only_query(tmp_path / "limited", queries[6].rstrip(";"))
    assert [(row[2], row[3], row[4]) for row in tightest] == [("actions", 1, 4), ("units", 10, 100)]
    from ledger import Case

    with Case.open(path) as opened:
        balances, actions = opened.balances(), opened.actions()
    assert sum(row[2] for row in spend) == sum(b["spent_units"] for b in balances) == 125
    assert {(row[0], row[1], row[3]) for row in refunds} == {
        (b["revision"], b["hypothesis_id"], sum(a["reward_units"] or 0 for a in actions
                                                if a["hypothesis_id"] == b["hypothesis_id"])) for b in balances}
    assert len(last_ten) == 10 and [row[0] for row in last_ten] == list(range(56, 46, -1))
    assert {row[:2] for row in abandoned} == {(b["revision"], b["hypothesis_id"]) for b in balances
                                              if b["terminal_reason"]}
    assert all(row[4] for row in abandoned)
    assert [row[2] for row in pending] == [a["action_id"] for a in actions
                                           if a["status"] in ("reserved", "awaiting_assessment")]


def _user_facing_texts():
    """README, docs/, the help of every command and every string of the library that is not a
    docstring (error messages among them)."""
    import ast

    yield "README.md", README
    for path in sorted((REPO / "docs").glob("*.md")):
        yield f"docs/{path.name}", path.read_text(encoding="utf-8")
    for path, command in [("ledger", main), *commands(main)]:
        yield f"{path} --help", command.get_help(click.Context(command, info_name=path))
    for source in sorted((REPO / "ledger").rglob("*.py")):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                yield f"{source.relative_to(REPO)}:{node.lineno}", node.value


def test_no_user_facing_text_cites_the_spec():
    """A user of the package has no spec: README, docs/, --help and messages describe behaviour."""
    citing = [where for where, text in _user_facing_texts() if re.search(r"\bSPEC\b", text)]
    assert citing == []


def test_docs_cover_every_command_option_view_column_and_error_code(tmp_path):
    from ledger import ALL_CODES, run_demo
    from ledger.ground.errors import CLI_ONLY_CODES

    cli_doc = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    for path, command in commands(main):
        assert f"## `{path}`" in cli_doc, path
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert opt in cli_doc.split(f"## `{path}`", 1)[1], (path, opt)
    errors_doc = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    assert re.findall(r"^\| `([A-Z_]+)` \|", errors_doc, flags=re.MULTILINE) == list(ALL_CODES + CLI_ONLY_CODES)
    sql_doc = (REPO / "docs" / "sql.md").read_text(encoding="utf-8")
    path, _, _ = run_demo(tmp_path / "d", echo=lambda text: None)
    db = sqlite_utils.Database(f"{path}/ledger.sqlite")
    for view in db.view_names():
        assert f"`{view}`" in sql_doc, view
        for column in db[view].columns_dict:
            assert f"`{column}`" in sql_doc, (view, column)
    files_doc = (REPO / "docs" / "files.md").read_text(encoding="utf-8")
    assert "import such files as text" in files_doc and "Lock files" in files_doc


def test_the_readme_is_a_front_door_to_every_docs_page_and_every_link_resolves():
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert {"concepts.md", "cli.md", "sql.md", "errors.md", "files.md"} <= set(pages)
    for name in pages:
        assert f"(docs/{name})" in README, f"the README does not link docs/{name}"
    assert len(README.splitlines()) < 400
    for where, text in [(REPO, README), *((DOCS, doc(name)) for name in pages)]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (where / target).exists(), f"broken link {target} in {where}"


def test_the_readme_evidence_example_runs_on_a_case_with_a_budget(tmp_path):
    """The evidence snippet, on a case with a budget and the file it reads, stores a record and settles
    the action it paid for (a later snippet on H1 would otherwise meet ACTION_PENDING)."""
    import subprocess
    import sys

    evidence = README.split("## Evidence store", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    setup = ("from pathlib import Path\nfrom ledger import BudgetConfig, Case\n"
             "(Path('c') / 'sources').mkdir(parents=True)\n"
             "(Path('c') / 'sources' / 'inventory.py').write_text('stock += qty\\nstock += qty\\n')\n"
             "case = Case.create('c', case_id='BUG-20')\ncase.open_revision([{'statement': 'twice'}])\n"
             "case.transition('INVESTIGATING_HYPOTHESES')\nbudget = case.budget(BudgetConfig.example())\n"
             "budget.initialize()\n")
    check = ('\nprint(result.records[0]["record_id"], result.records[0]["novelty_score"])\n'
             'print(budget.snapshot().state["H1"]["pending_action_id"], budget.action_status("H1", "q-0004"), '
             'case.query("SELECT COUNT(*) AS n FROM evidence")[0]["n"])\ncase.close()\n')
    (tmp_path / "example.py").write_text(setup + evidence + check)
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["E000001 100", "None settled 1"]  # settled: nothing left pending


def test_code_cites_only_documents_the_repository_holds():
    """Code, SQL, schemas and configs cite the repository's own docs: every ``docs/….md`` they name
    exists, and none names the outside specification or a path outside the checkout."""
    missing, outside = [], []
    for folder in ("ledger", "cli", "sql", "schemas", "config", "tests", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in {".py", ".sql", ".json", ".toml", ".md"} or "__pycache__" in path.parts:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            where = str(path.relative_to(REPO))
            missing += [f"{where}: {name}" for name in re.findall(r"\bdocs/[\w./-]+?\.md\b", text)
                        if not (REPO / name).is_file()]
            if path.name != "test_docs.py" and (re.search(r"\bSPEC\b", text) or "../shared/" in text):
                outside.append(where)
    assert missing == []
    assert outside == []


TRAJECTORIES = Path(__file__).parent / "data" / "trajectories"


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


def test_the_sql_docs_say_what_sqlite_reports_for_view_column_types(budget, case):
    columns, rows = read_only_query(case.path, "SELECT name, type FROM pragma_table_info('balances')")
    empty = [name for name, declared in rows if declared == ""]
    text = (REPO / "docs/sql.md").read_text(encoding="utf-8")
    assert "Every view column has a declared type" not in text
    if empty:  # computed columns have no declared type on this SQLite: the docs say so
        assert "shows an empty type for them" in text
    _, values = read_only_query(case.path, "SELECT DISTINCT typeof(spent_units), typeof(statement) FROM balances")
    assert values == [("integer", "text")]


def test_the_api_page_lists_exactly_the_public_names():
    """docs/api.md has one table row per name of ``ledger.__all__``, and nothing else."""
    import ledger

    page = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| `(\w+)` \|", page, flags=re.M)
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(ledger.__all__)
    assert all(hasattr(ledger, name) for name in ledger.__all__)


def _signature_text(function) -> str:
    """``function``'s parameters as docs/api.md writes them: names, defaults, a ``*`` before the first
    keyword-only one."""
    import inspect

    shown, starred = [], False
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is parameter.KEYWORD_ONLY and not starred:
            shown.append("*")
            starred = True
        default = "" if parameter.default is parameter.empty else "=" + repr(parameter.default).replace("'", '"')
        shown.append(parameter.name + default)
    return ", ".join(shown)


def test_every_signature_the_api_page_gives_is_the_functions_own():
    """Names, defaults and which arguments are keyword-only, for the signatures table and ``Case.query``."""
    import ledger

    page = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    given = dict(re.findall(r"^\| `(\w+)\(([^`]*)\)` \|", page, flags=re.M))
    assert len(given) >= 9
    for name, parameters in given.items():
        assert parameters == _signature_text(getattr(ledger, name)), name
    (query,) = re.findall(r"`query\(([^`]*)\)`", page)
    assert query == _signature_text(ledger.Case.query).removeprefix("self, ")


@pytest.mark.slow  # over a second: the slow lane (.ci/run) runs it
def test_no_install_hint_names_a_package_the_index_does_not_have():
    """case-ledger is installed from a clone (``pip install '.[EXTRA]'``): no README, docs page,
    help text or message tells a user to ``pip install 'case-ledger[EXTRA]'``."""
    assert [where for where, text in _user_facing_texts() if "case-ledger[" in text] == []


def test_the_cli_reference_is_every_commands_own_help_text(monkeypatch):
    """docs/cli.md is what ``python tools/cli_reference.py`` writes from the commands' help (its
    introduction kept): a command, option or help text changed without rewriting the page fails.
    Click's own layout of help (where it wraps, how it shortens) changed between its releases, so
    the page is compared byte for byte only under the click it was written with (8.5)."""
    import importlib.metadata
    import importlib.util

    if not importlib.metadata.version("click").startswith("8.5."):
        pytest.skip("docs/cli.md is laid out by click 8.5; this click lays help out differently")

    monkeypatch.setenv("COLUMNS", "80")  # click wraps help at the terminal's width, at most 80
    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "tools" / "cli_reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    assert reference.render() == doc("cli.md"), "docs/cli.md is stale: run python tools/cli_reference.py"


def test_the_evidence_page_examples_run_as_printed(tmp_path):
    """docs/evidence.md's two Python blocks, one after the other, on a case with a budget and the
    file they read: a router result and a human test, both settled."""
    package = tmp_path / "cases" / "BUG-20"
    (package / "sources").mkdir(parents=True)
    (package / "sources" / "app.py").write_text("def add(a, b):\n    return a - b\n", encoding="utf-8")
    with Case.create(package, case_id="BUG-20") as case:
        case.open_revision([{"statement": "add() subtracts"}, {"statement": "the test is wrong"}], 100)
        case.transition("INVESTIGATING_HYPOTHESES")
        case.budget().initialize()
    code = "".join(re.findall(r"```python\n(.*?)```", doc("evidence.md"), flags=re.DOTALL))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with Case.open(package) as case:
        actions = [(a["action_id"], a["action"], a["status"], a["novelty_score"]) for a in case.actions()]
    assert actions == [("q1", "source.read_context", "settled", 100), ("t1", "test.human", "settled", 100)]


def test_every_test_file_and_test_the_docs_name_exists():
    """A page that says where a promise is tested names a file (and test) that is there."""
    for where, text in [("README.md", README), *((f"docs/{p.name}", p.read_text(encoding="utf-8"))
                                                 for p in sorted(DOCS.glob("*.md")))]:
        for path, test in re.findall(r"\b(tests/[\w/]+\.py)(?:::(\w+))?", text):
            assert (REPO / path).is_file(), f"{where} names {path}, which does not exist"
            if test and not test.endswith("_"):
                assert f"def {test}" in (REPO / path).read_text(encoding="utf-8"), f"{where} names {path}::{test}"


def test_the_architecture_page_names_every_module_in_its_folders_row_and_every_test_file():
    """docs/architecture.md is where a newcomer looks for a module or its tests: six modules and four
    test files had been added without a word there."""
    page = doc("architecture.md")
    rows: dict[str, str] = {}
    for found in re.finditer(r"^\| `(\w+)/`[^|]*\| ([^|]+) \|", page, re.M):
        rows.setdefault(found[1], found[2])  # the layers' table comes before the tests' table
    for folder in ("ground", "storage", "rules", "router", "model", "services", "package_tools", "simulation",
                   "browse", "runs", "cli"):
        base = REPO / ("cli" if folder == "cli" else f"ledger/{folder}")
        modules = {p.stem for p in base.glob("*.py") if p.stem not in ("__init__", "__main__")}
        named = set(re.findall(r"`(\w+)`", rows[folder]))
        left_out = modules - named - ({"budget", "case", "evidence", "fleet", "frontier", "inspect", "journal",
                                       "package", "runs", "scope", "serve", "simulate"} if folder == "cli" else set())
        assert left_out == set(), (folder, sorted(left_out))
    tests = {p.name for p in (REPO / "tests").glob("test_*.py")}
    assert {t for t in tests if f"`{t}`" not in page} == set()


def test_the_lists_of_views_people_read_name_every_public_view():
    """`ledger sql --help` and docs/browse.md list the views by hand: a new view must join them."""
    from ledger.storage.sqlfiles import PUBLIC_VIEWS

    help_text = CliRunner().invoke(main, ["sql", "--help"]).output
    listed = re.search(r"Public views: ([^.]+)\.", " ".join(help_text.split()))[1]
    assert sorted(listed.split(", ")) == sorted(PUBLIC_VIEWS)
    browse = " ".join(doc("browse.md").split())
    top = re.search(r"the top of a case's page lists (.+?), each with what it holds", browse)[1]
    assert sorted(re.findall(r"`(\w+)`", top)) == sorted(PUBLIC_VIEWS)


def test_the_documented_history_of_one_action_holds_its_evidence_store_events(tmp_path):
    """docs/sql.md: an action whose result went through the evidence store has events with no
    operation key; the documented query finds them with its reserve, result and settle."""
    from ledger import read_only_query, run_demo

    page = (REPO / "docs" / "sql.md").read_text(encoding="utf-8")
    query = page.split("The whole history of one action", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    path, _, _ = run_demo(tmp_path / "d", echo=lambda text: None)
    _, rows = read_only_query(path, query)
    assert [row[1] for row in rows] == ["budget.reserved", "evidence.requested", "evidence.result", "evidence.recorded",
                                        "evidence.indexed", "budget.evidence_recorded", "budget.settled"]
    assert [row[0] for row in rows] == list(range(rows[0][0], rows[0][0] + 7))
