"""docs/concepts.md: configuration files and the policy they produce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import AnalysisConfig, BudgetConfig, LedgerError
from ledger.ground.config import DEFAULT_POLICY
from ledger.ground.errors import (CONFIG_INVALID, INVALID_ARGUMENT)
from conftest import EXAMPLE_BUDGET, REPO, run_cli
from ledger_cli.main import main as cli_main

def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "budget.local.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_example_files_hold_the_spec_defaults():
    policy = BudgetConfig.load(EXAMPLE_BUDGET).policy
    assert policy == {**DEFAULT_POLICY, "action_costs": {
        "source.read_context": 5, "source.find_text": 10, "database.lookup": 10, "research.lookup": 20}}
    analysis = AnalysisConfig.load(REPO / "config" / "analysis.example.toml")
    assert (analysis.units_per_hypothesis, analysis.max_hypotheses) == (100, 8)
    assert analysis.storage == {"synchronous": "FULL", "busy_timeout_ms": 5000}
    assert analysis.limits["event_bytes_max"] == 2 * 1024 * 1024


def test_defaults_in_code_have_no_action_costs():
    config = BudgetConfig()
    assert config.policy["action_costs"] == {}
    assert config.cost_units("source.read_context") == 10
    assert config.affordability_floor_units == 10


@pytest.mark.parametrize("text, key", [
    ("max_reward_bps = 2500.0\n", "max_reward_bps"),
    ("default_action_cost = true\n", "default_action_cost"),
    ("max_reward_bps = 10000\n", "max_reward_bps"),
    ("new_evidence_score = 101\n", "new_evidence_score"),
    ("default_action_cost = 0\n", "default_action_cost"),
    ("max_low_information_steps = 0\n", "max_low_information_steps"),
    ("max_scarcity_bps = 9999\n", "max_scarcity_bps"),
    ("surprise = 1\n", "surprise"),
    ('[action_costs]\n"source.read_context" = 1.5\n', "action_costs.source.read_context"),
    ('[action_costs]\n"Bad Name" = 3\n', "action_costs"),
    ("[test_costs]\nrobot = 3\n", "test_costs.robot"),
    ("tier_shallow_below_pct = 10\ntier_deferred_below_pct = 20\n", "tier_shallow_below_pct"),
    ('max_reward_bps = "8000"\n', "max_reward_bps"),
])
def test_a_bad_budget_config_is_refused_naming_the_key(tmp_path, text, key):
    with pytest.raises(LedgerError) as caught:
        BudgetConfig.load(write(tmp_path, text))
    assert caught.value.code == CONFIG_INVALID
    assert key in caught.value.message


def test_a_schema_refusal_says_the_bound_and_shows_the_value_as_json_shows_it(tmp_path):
    from ledger.ground.schemas import validate

    with pytest.raises(LedgerError) as caught:
        BudgetConfig.load(write(tmp_path, "[action_costs]\n" + "".join(f'"a.b{i}" = 1\n' for i in range(257))))
    assert caught.value.code == CONFIG_INVALID
    assert caught.value.message.endswith("action_costs: 257 entries, more than the 256 allowed")
    for instance, message in (({"max_hypotheses": None}, "max_hypotheses: null is not of type 'integer'"),
                              ({"max_hypotheses": True}, "max_hypotheses: true is not of type 'integer'"),
                              ({"storage": {"synchronous": "OFF"}},
                               'storage.synchronous: the string "OFF" is not one of ["FULL", "NORMAL"]')):
        with pytest.raises(LedgerError) as caught:
            validate("analysis-config-v1", instance, CONFIG_INVALID, "analysis config")
        assert caught.value.message == f"analysis config: {message}"


def test_a_refusal_quoting_a_huge_value_keeps_its_start_and_its_reason(tmp_path):
    """A message quotes what it refuses; a huge value is cut in the middle, so the message stays short
    and still ends with why (here an action name of 3,000 characters that is no dotted name)."""
    config = tmp_path / "big.toml"
    config.write_text('[action_costs]\n"' + "B" * 3000 + '" = 5\n')
    with pytest.raises(LedgerError) as refused:
        BudgetConfig.load(config)
    message = refused.value.message
    assert refused.value.code == CONFIG_INVALID and len(message) < 600
    assert message.startswith(f"{config}: budget config: action_costs: 'BBBB")
    assert "characters left out" in message and message.endswith(
        "BBB' does not match '^[a-z][a-z0-9_]*(\\\\.[a-z][a-z0-9_]*)+$'"), message


def test_a_refusal_naming_a_huge_key_shows_its_start_and_end_in_the_location(tmp_path):
    """80 characters of the key in the refusal's location, as a schema refusal's location shows one."""
    config = tmp_path / "big.toml"
    config.write_text('[limits]\n' + "k" * 1000 + ' = 5\n')
    with pytest.raises(LedgerError) as refused:
        AnalysisConfig.load(config)
    location = refused.value.message.split(": ")[1]
    assert location == f"limits.{'k' * 26} … (961 characters left out) … {'k' * 13}", refused.value.message
    assert len(refused.value.message) < 600


def test_a_budget_config_given_a_simulation_policys_units_per_hypothesis_says_where_it_goes(tmp_path):
    """A policy file from a simulation (it may set units_per_hypothesis) given as --config to apply."""
    policy = tmp_path / "policy.toml"
    policy.write_text("units_per_hypothesis = 100\n")
    with pytest.raises(LedgerError) as refused:
        BudgetConfig.load(policy)
    assert (refused.value.code, refused.value.message) == (CONFIG_INVALID, (
        f"{policy}: units_per_hypothesis: a simulation policy's setting, not a budget config's: give 'ledger apply "
        "--units-per-hypothesis N' (apply_journal's units_per_hypothesis= in Python), or the analysis config's "
        "units_per_hypothesis"))


def test_every_refusal_message_is_at_most_two_thousand_characters():
    from ledger.ground.errors import MESSAGE_CHARS_MAX, shortened

    text = "start " + "x" * 100_000 + " end"
    refusal = LedgerError(INVALID_ARGUMENT, text)
    assert len(refusal.message) <= MESSAGE_CHARS_MAX == 2_000
    assert refusal.message.startswith("start x") and refusal.message.endswith("x end")
    left_out = int(refusal.message.split(" … (")[1].split(" characters")[0])
    assert len(refusal.message) - len(f" … ({left_out} characters left out) … ") + left_out == len(text)
    assert str(refusal) == f"INVALID_ARGUMENT: {refusal.message}"
    assert shortened("short", 10) == "short" and LedgerError(INVALID_ARGUMENT, "y" * 2_000).message == "y" * 2_000


def left_out(message: str) -> int:
    return int(message.split(" … (")[1].split(" characters")[0])


@pytest.mark.parametrize("prefix, more", [("/some/config.toml: ", ""), ("p" * 5_000 + ": ", ""), ("", "z" * 7_000)])
def test_a_refusal_quoting_a_shortened_message_counts_everything_left_out(prefix, more):
    """A refusal whose message quotes another's (a config file's name before the reason, a journal's
    line) shortened the quoted message again: its mark was cut out and a new count of 45 characters
    stood for the 98,000 left out."""
    inner = LedgerError(CONFIG_INVALID, "k" * 100_000 + " end")
    outer = LedgerError(CONFIG_INVALID, prefix + inner.message + more)
    assert len(outer.message) <= 2_000 and outer.message.count("characters left out") == 1
    mark = f" … ({left_out(outer.message)} characters left out) … "
    assert len(outer.message) - len(mark) + left_out(outer.message) == len(prefix) + 100_004 + len(more)
    assert outer.message.startswith((prefix or "k")[:20]) and outer.message.endswith((more or " end")[-4:])


def test_a_refusal_quoting_two_shortened_messages_or_text_that_only_looks_shortened_counts_exactly():
    """Two quoted refusals lost both their counts (278 for 5,600 left out); a value holding text like
    a mark (a column name) was taken for one and counted 1,004,067 characters in a 6,100-character text."""
    first, second = LedgerError(INVALID_ARGUMENT, "A" * 3000), LedgerError(INVALID_ARGUMENT, "B" * 3000)
    both = LedgerError(INVALID_ARGUMENT, f"{first.message} and {second.message}")
    assert both.message.count("characters left out") == 1 and both.message.startswith("AAA")
    assert len(both.message) - len(f" … ({left_out(both.message)} characters left out) … ") + left_out(both.message) == 6005
    looks = "no such column: " + "a" * 3000 + " … (999999 characters left out) … " + "b" * 3000
    quoted_text = LedgerError(INVALID_ARGUMENT, looks)
    assert quoted_text.message.count("characters left out") == 1 and quoted_text.message.endswith("bbb")
    mark = f" … ({left_out(quoted_text.message)} characters left out) … "
    assert len(quoted_text.message) - len(mark) + left_out(quoted_text.message) == len(looks)


@pytest.mark.slow  # over half a second: the slow lane (.ci/run) runs it
def test_a_quoted_refusal_is_counted_exactly_whatever_other_threads_refuse_meanwhile():
    """The shortened refusals kept whole were shared by all threads, 16 of them: with 20 threads
    refusing at once, a quarter of the counts were wrong (82 for 1,097 left out)."""
    import threading

    wrong: list[int] = []

    def refuse(k: int) -> None:
        for i in range(100):
            inner = LedgerError(INVALID_ARGUMENT, f"T{k}-{i}-" + "w" * 3000)
            outer = LedgerError(INVALID_ARGUMENT, "q" * 50 + inner.message)
            total = 50 + len(f"T{k}-{i}-") + 3000
            mark = f" … ({left_out(outer.message)} characters left out) … "
            if len(outer.message) - len(mark) + left_out(outer.message) != total:
                wrong.append(left_out(outer.message))

    threads = [threading.Thread(target=refuse, args=(k,)) for k in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_a_checked_config_table_cannot_be_filled_again_through_init():
    config = BudgetConfig.example()
    with pytest.raises(TypeError):
        config.policy.__init__({"zzz": 1})
    assert "zzz" not in config.policy and config == BudgetConfig.example()


def test_a_config_key_of_100000_characters_is_counted_whole_in_the_refusal_naming_the_file(tmp_path):
    config = tmp_path / "k.toml"
    config.write_text('"' + "k" * 100_000 + '" = 1\n')
    with pytest.raises(LedgerError) as refused:
        AnalysisConfig.load(config)
    message = refused.value.message
    assert message.startswith(f"{config}: kkk") and message.endswith("k: unknown key")
    mark = f" … ({left_out(message)} characters left out) … "
    assert len(message) - len(mark) + left_out(message) == len(f"{config}: ") + 100_000 + len(": unknown key")


def test_a_message_naming_many_things_names_the_first_few_and_counts_the_rest():
    from ledger.ground.errors import first_few

    assert first_few([], 3) == "" and first_few(["a", "b", "c"], 3) == "a, b, c"
    assert first_few(["a", "b", "c", "d"], 3) == "a, b, c and 1 more"
    assert first_few([f"r{i}" for i in range(1_000)], 2) == "r0, r1 and 998 more"


@pytest.mark.parametrize("action_id, shown", [("step-\ud800", "step-\\ud800"), ("x1\n", "x1\\n"),
                                              ("a\x1b[2J", "a\\x1b[2J"), ("b\u2028c", "b\\u2028c")])
def test_a_refusal_quoting_what_a_caller_gave_prints_on_one_line_on_any_utf8_stream(budget, action_id, shown):
    """A lone surrogate in a message made print(err) raise UnicodeEncodeError; a line break split it."""
    import io

    with pytest.raises(LedgerError) as caught:
        budget.reserve("H1", action_id, "source.read_context")
    assert caught.value.code == "INVALID_ID" and shown in caught.value.message
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    print(caught.value, file=stream)
    stream.flush()
    assert stream.buffer.getvalue().decode("utf-8").count("\n") == 1
    assert LedgerError(INVALID_ARGUMENT, "plain é ✓ text").message == "plain é ✓ text"


def test_unparseable_or_missing_toml_is_config_invalid(tmp_path):
    for path in (write(tmp_path, "max_reward_bps = = 1\n"), tmp_path / "absent.toml"):
        with pytest.raises(LedgerError) as caught:
            BudgetConfig.load(path)
        assert caught.value.code == CONFIG_INVALID


@pytest.mark.parametrize("data, key", [
    ({"units_per_hypothesis": 2.0}, "units_per_hypothesis"),
    ({"max_hypotheses": True}, "max_hypotheses"),
    ({"storage": {"synchronous": "OFF"}}, "storage.synchronous"),
    ({"storage": {"busy_timeout_ms": -1}}, "storage.busy_timeout_ms"),
    ({"limits": {"budget_events_max": 0}}, "limits.budget_events_max"),
    ({"limits": {"made_up": 1}}, "limits.made_up"),
    ({"units": 3}, "units"),
])
def test_a_bad_analysis_config_is_refused_naming_the_key(data, key):
    with pytest.raises(LedgerError) as caught:
        AnalysisConfig.from_mapping(data)
    assert caught.value.code == CONFIG_INVALID
    assert key in caught.value.message


def test_the_policy_hash_covers_every_key():
    assert BudgetConfig().policy_sha256 != BudgetConfig.from_mapping({"max_reward_bps": 7999}).policy_sha256
    assert BudgetConfig().policy_sha256 == BudgetConfig.from_mapping({}).policy_sha256


def test_every_shipped_json_schema_is_a_valid_draft_2020_12_schema():
    """The library trusts its shipped schemas at run time (no metaschema check per process); this is that check."""
    from jsonschema import Draft202012Validator

    from ledger.ground.schemas import shipped_schemas

    schemas = shipped_schemas()
    assert len(schemas) >= 10
    for schema in schemas:
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", schema["$id"]
        Draft202012Validator.check_schema(schema)


_INTERRUPTED_IMPORT = """
import importlib._bootstrap as bootstrap, os, signal

real = bootstrap._verbose_message
def loaded(message, *args, **kwargs):  # Ctrl-C as referencing.exceptions is loaded, before its parent holds it
    if args and args[0] == "referencing.exceptions":
        bootstrap._verbose_message = real
        print("sent", flush=True)
        os.kill(os.getpid(), signal.SIGINT)
    return real(message, *args, **kwargs)
bootstrap._verbose_message = loaded

from ledger.ground import schemas
try:
    schemas.validator("budget-policy-v1")
except KeyboardInterrupt:
    print("interrupted")
import referencing
print("whole" if hasattr(referencing, "exceptions") else "cut in two")
"""


def test_a_ctrl_c_while_the_schema_library_is_first_imported_waits_until_it_is_whole():
    """jsonschema is imported on first use; a Ctrl-C cut its import in two, leaving a module without a
    submodule for the rest of the process (a later validation failed with AttributeError, not as the
    interrupted call did). The import finishes first, then the interrupt is raised."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=120)
    if "sent" not in done.stdout:
        pytest.skip("this Python's import machinery does not report a module loaded where the test sends Ctrl-C")
    assert done.stdout.split() == ["sent", "interrupted", "whole"], done.stdout + done.stderr


def test_the_built_in_analysis_defaults_pass_the_schema_the_library_skips_for_them():
    from ledger.ground.config import default_analysis_data
    from ledger.ground.schemas import validate

    validate("analysis-config-v1", default_analysis_data(), "CONFIG_INVALID", "analysis config")
    assert AnalysisConfig().limits == default_analysis_data()["limits"]


def test_the_policies_the_library_does_not_revalidate_are_the_default_and_example_ones_and_pass_the_schema():
    import ledger.ground.config as config_module
    from ledger.ground.canonical import canonical_sha256
    from ledger.ground.schemas import validate
    from ledger.simulation.simulator import example_policy

    known = {BudgetConfig().policy_sha256: BudgetConfig(), example_policy().config.policy_sha256: example_policy().config}
    assert set(known) == config_module.CHECKED_POLICY_SHA256
    for sha, config in known.items():
        validate("budget-policy-v1", config.to_dict(), "CONFIG_INVALID", "budget config")
        assert canonical_sha256(config.to_dict()) == sha


def test_a_policy_is_schema_checked_once_per_process_and_a_bad_one_every_time(monkeypatch):
    import ledger.ground.config as config_module

    calls = []
    real = config_module.validate
    monkeypatch.setattr(config_module, "validate", lambda *a, **k: (calls.append(a[1]), real(*a, **k)))
    monkeypatch.setattr(config_module, "_VALIDATED_POLICIES", set())
    BudgetConfig.from_mapping({"max_reward_bps": 7001})
    BudgetConfig.from_mapping({"max_reward_bps": 7001})
    assert len(calls) == 1
    BudgetConfig()  # the defaults: checked by the test above, never at run time
    assert len(calls) == 1
    for _ in range(2):
        with pytest.raises(LedgerError) as caught:
            BudgetConfig.from_mapping({"max_reward_bps": 10_001})
        assert caught.value.code == CONFIG_INVALID and "max_reward_bps" in caught.value.message
    assert len(calls) == 3


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli_main, [str(a) for a in args], input=stdin)
    return done.exit_code, done.stdout, done.stderr


@pytest.mark.parametrize("option", ["--config", "--analysis-config"])
def test_a_config_that_is_a_folder_or_missing_is_config_invalid_exit_1(case, tmp_path, option):
    for path, says in ((tmp_path, "not a regular file"), (tmp_path / "missing.toml", "no such file")):
        code, out, err = cli(option, path, "balances", case.path)
        assert (code, out) == (1, "") and err == f"error: CONFIG_INVALID: {path}: {says}\n"


@pytest.mark.parametrize("option", ["--config", "--analysis-config"])
def test_a_config_this_user_may_not_read_is_config_invalid_exit_1_not_a_usage_error(case, tmp_path, option,
                                                                                    monkeypatch):
    """The loader says it, as for a missing file (click's own check made it a usage error, exit 2). Run as
    root here, so the file's refusal is made by the checks themselves."""
    import os as os_module

    from ledger.ground import config as config_module

    path = tmp_path / "unreadable.toml"
    path.write_text("max_low_information_steps = 4\n")
    real_access = os_module.access
    monkeypatch.setattr(os_module, "access", lambda p, mode, **kw: False if str(p) == str(path) else
                        real_access(p, mode, **kw))

    def refused(name):
        raise PermissionError(13, "Permission denied", str(name))

    monkeypatch.setattr(config_module, "open_to_read", refused)
    code, out, err = cli(option, path, "balances", case.path)
    assert (code, out) == (1, "")
    assert err == f"error: CONFIG_INVALID: {path}: cannot read: [Errno 13] Permission denied: '{path}'\n"


@pytest.mark.parametrize("text", ["action_costs = 5\n", "action_costs = [1, 2]\n", 'action_costs = "ab"\n',
                                  "test_costs = 5\n", "[[action_costs]]\nx = 1\n"])
def test_a_cost_table_that_is_not_a_table_is_config_invalid(tmp_path, text):
    path = tmp_path / "b.toml"
    path.write_text(text)
    with pytest.raises(LedgerError) as caught:
        BudgetConfig.load(path)
    assert caught.value.code == CONFIG_INVALID


@pytest.mark.parametrize("load, text, message", [
    (BudgetConfig.load, "default_action_cost = {a = 1.5}\n", "default_action_cost: must be an integer, got an object"),
    (BudgetConfig.load, "[max_reward_bps]\nx = 1\n", "max_reward_bps: must be an integer, got an object"),
    (AnalysisConfig.load, "units_per_hypothesis = {a = 1}\n",
     "units_per_hypothesis: must be an integer, got an object"),
    (AnalysisConfig.load, "[limits]\nevent_bytes_max = {a = 1}\n",
     "limits.event_bytes_max: must be an integer, got an object"),
], ids=["inline", "table", "analysis", "limits"])
def test_a_table_where_an_integer_belongs_is_named_by_its_own_key(tmp_path, load, text, message):
    """A table given for a setting that takes an integer was blamed on the table's first key
    (``default_action_cost.a: must be an integer, got the number 1.5``)."""
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(LedgerError) as caught:
        load(path)
    assert (caught.value.code, caught.value.message) == (CONFIG_INVALID, f"{path}: {message}")


def test_an_exception_a_callers_own_mapping_raises_comes_out_as_itself():
    """The library reads a mapping it is given through the mapping's own methods: what they raise is
    the caller's, raised unchanged (docs/api.md)."""
    from collections.abc import Mapping

    class Lying(Mapping):
        def __iter__(self):
            return iter(["default_action_cost"])

        def __len__(self):
            return 1

        def __getitem__(self, key):
            raise KeyError(key)

    with pytest.raises(KeyError, match="default_action_cost"):
        BudgetConfig.from_mapping(Lying())
    with pytest.raises(KeyError, match="default_action_cost"):
        AnalysisConfig.from_mapping({"limits": Lying()})


@pytest.mark.parametrize("config", [True, "budget.toml", {"default_action_cost": 10}], ids=["bool", "str", "dict"])
def test_a_budget_config_of_the_wrong_type_is_refused_at_once(case, config):
    with pytest.raises(LedgerError) as caught:
        case.budget(config)
    assert caught.value.code == INVALID_ARGUMENT


def test_a_named_config_must_be_readable_even_for_reads(case):
    case.close()
    result = run_cli("--config", str(case.path / "missing.toml"), "state", str(case.path))
    assert result.returncode == 1 and b"error: CONFIG_INVALID: " in result.stderr


# --- TOML the parser cannot take: every config entry point, a LedgerError naming the file -----------
HOSTILE_TOML = {
    "nested_arrays": ("x = " + "[" * 500 + "]" * 500 + "\n", "nested too deeply", None),
    "nested_tables": ("x = " + "{a = " * 500 + "1" + "}" * 500 + "\n", "nested too deeply", None),
    "long_integer": ("# a comment\nlow_information_threshold = " + "9" * 4301 + "\n", "more than 4300 digits", 2),
    "long_negative": ("\n\n[limits]\nbudget_events_max = -" + "1_000" * 1100 + "\n", "more than 4300 digits", 4),
    # the line of the value, not of a long run of digits in a comment or a string before it
    "long_after_others": ("# " + "1" * 5000 + '\nname = "' + "3" * 5000 + '"\n\nmax_low_information_steps = '
                          + "2" * 5000 + "\n", "more than 4300 digits", 4),
    "long_after_a_multiline_string": ("a = \'\'\'\n" + "1" * 5000 + '\n\'\'\'\nb = """\n' + "3" * 5000 + '\n"""\n'
                                      "max_low_information_steps = " + "2" * 5000 + "\n", "more than 4300 digits", 7),
    "over_a_mebibyte": ("#" * (1024 * 1024) + "\n", "larger than 1048576 bytes: no config this program reads is "
                        "so long (a wrong file?)", None),
}


def _entry_points():
    from ledger.simulation.simulator import load_policy

    return {"BudgetConfig.load": BudgetConfig.load, "AnalysisConfig.load": AnalysisConfig.load,
            "load_policy": load_policy}


@pytest.mark.parametrize("kind", sorted(HOSTILE_TOML))
@pytest.mark.parametrize("entry", ["BudgetConfig.load", "AnalysisConfig.load", "load_policy"])
def test_toml_beyond_the_parsers_limits_is_config_invalid_naming_the_file_and_line(tmp_path, kind, entry):
    text, words, line = HOSTILE_TOML[kind]
    path = write(tmp_path, text)
    with pytest.raises(LedgerError) as refused:
        _entry_points()[entry](path)
    assert refused.value.code == CONFIG_INVALID
    assert refused.value.message.startswith(str(path)) and words in refused.value.message
    if line:
        assert f"(line {line})" in refused.value.message


@pytest.mark.parametrize("kind", sorted(HOSTILE_TOML))
@pytest.mark.parametrize("where", [["--config", "{f}", "state", "{case}"], ["--analysis-config", "{f}", "state", "{case}"],
                                   ["simulate", "{journal}", "--policy", "{f}"]])
@pytest.mark.sampled(every=4)
def test_the_command_line_reports_such_toml_as_config_invalid_naming_the_file(tmp_path, kind, where):
    from conftest import run_cli

    path = write(tmp_path, HOSTILE_TOML[kind][0])
    journal = tmp_path / "j.jsonl"
    journal.write_text('{"op": "transition", "to": "GENERATING_HYPOTHESES"}\n', encoding="utf-8")
    run = run_cli(*[a.format(f=path, case=tmp_path / "c", journal=journal) for a in where])
    assert run.returncode == 1, run.stderr
    assert run.stderr.decode().startswith(f"error: CONFIG_INVALID: {path}") and b"Traceback" not in run.stderr


def test_a_config_saved_with_a_byte_order_mark_is_read(tmp_path):
    example = EXAMPLE_BUDGET.read_text(encoding="utf-8")
    path = write(tmp_path, "\ufeff" + example)
    assert BudgetConfig.load(path).policy_sha256 == BudgetConfig.load(EXAMPLE_BUDGET).policy_sha256
    from ledger.simulation.simulator import load_policy

    assert load_policy(path).policy_sha256 == load_policy(EXAMPLE_BUDGET).policy_sha256
    analysis = write(tmp_path, "\ufeff[limits]\nbudget_events_max = 500\n")
    assert AnalysisConfig.load(analysis).limits["budget_events_max"] == 500


def test_a_value_the_schema_refuses_names_the_file_and_the_key(tmp_path):
    path = write(tmp_path, "[limits]\nbudget_events_max = -1\n")
    with pytest.raises(LedgerError) as refused:
        AnalysisConfig.load(path)
    assert refused.value.message.startswith(f"{path}: ") and "budget_events_max" in refused.value.message
    assert refused.value.details["key"] == "limits.budget_events_max"


@pytest.mark.parametrize("build, key", [
    (lambda n: BudgetConfig.from_mapping({"default_action_cost": n}), "default_action_cost"),
    (lambda n: BudgetConfig.from_mapping({"action_costs": {"source.find_text": -n}}), "action_costs.source.find_text"),
    (lambda n: BudgetConfig.from_mapping({"test_costs": {"human": n}}), "test_costs.human"),
    (lambda n: AnalysisConfig(units_per_hypothesis=n), "units_per_hypothesis"),
    (lambda n: AnalysisConfig(limits={"budget_events_max": n}), "limits.budget_events_max"),
])
@pytest.mark.parametrize("number", [2 ** 53, 10 ** 30, 10 ** 5000], ids=["2**53", "10**30", "10**5000"])
def test_a_config_integer_past_the_json_range_is_config_invalid_naming_the_key_whatever_its_size(build, key, number):
    """A config built in Python skips the TOML parser's digit limit: an integer of 5,000 digits
    is refused like one just past 2**53-1, naming the key, never a raw ValueError."""
    with pytest.raises(LedgerError) as caught:
        build(number)
    assert caught.value.code == CONFIG_INVALID and caught.value.details["key"] == key
    assert f"{key}: an integer of about" in caught.value.message and len(caught.value.message) < 200


def test_a_vary_value_too_long_for_an_integer_is_a_short_usage_error():
    done = CliRunner().invoke(cli_main, ["simulate", str(REPO / "tests" / "data" / "trajectories"),
                                         "--vary", "default_action_cost=" + "9" * 5000])
    assert done.exit_code == 2 and "(5000 characters) is not an integer (ASCII digits, an optional leading -, at most 4300 digits)" in done.stderr
    assert len(done.stderr) < 1000


def test_a_schema_message_starting_with_the_value_names_it_as_json_whatever_the_rule():
    from jsonschema import Draft202012Validator

    from ledger.ground.schemas import schema_message

    for schema, instance, message in (({"minItems": 2}, [None], "an array is too short"),
                                      ({"const": 1}, None, "1 was expected"),
                                      ({"not": {}}, True, "true should not be valid under {}")):
        (error,) = Draft202012Validator(schema).iter_errors(instance)
        assert schema_message(error) == message


def test_the_export_file_bound_is_the_largest_event_or_content_an_analysis_config_allows():
    """Import refuses an event or content file over EXPORT_FILE_BYTES_MAX: no config may allow one."""
    from ledger.ground.paths import EXPORT_FILE_BYTES_MAX
    limits = json.loads((REPO / "schemas" / "analysis-config-v1.json").read_text())["properties"]["limits"]["properties"]
    assert {limits[key]["maximum"] for key in ("event_bytes_max", "evidence_artifact_bytes_max")} == {EXPORT_FILE_BYTES_MAX}


def test_a_checked_policy_cannot_be_edited_so_what_initialize_records_is_what_its_hash_covers(tmp_path):
    """An edit of BudgetConfig.policy after it was checked (its hash computed once) was recorded by
    initialize under the hash of the unedited policy: verify refused the honest ledger, the policy
    check compared the wrong policies, and an invalid value reached the hash chain."""
    import pickle

    from ledger import Case, verify_case

    config = BudgetConfig()
    with pytest.raises(TypeError):
        config.policy["action_costs"]["tests.run"] = 5
    with pytest.raises(TypeError):
        config.policy["default_action_cost"] = -5
    assert config.policy_sha256 == BudgetConfig().policy_sha256 and config.policy["action_costs"] == {}
    edited = config.to_dict()
    edited["action_costs"]["tests.run"] = 5  # a copy: editing it changes nothing checked
    assert config.policy["action_costs"] == {} and BudgetConfig.from_mapping(edited).cost_units("tests.run") == 5
    assert pickle.loads(pickle.dumps(config)) == config and BudgetConfig(policy=config.policy) == config
    with Case.create(tmp_path / "c", "POLICY-1") as case:
        case.open_revision([{"statement": "a"}])
        case.transition("INVESTIGATING_HYPOTHESES")
        priced = BudgetConfig.from_mapping(edited)
        case.budget(priced).initialize()
        assert case.budget(priced).reserve("H1", "q1", "tests.run").action["cost_units"] == 5
        with pytest.raises(LedgerError) as changed:
            case.budget(BudgetConfig()).reserve("H1", "q2", "tests.run")
    assert changed.value.code == "BUDGET_POLICY_CHANGED"
    assert verify_case(tmp_path / "c").head_seq == 5  # raises INTEGRITY_ERROR when it fails


def test_checked_analysis_settings_cannot_be_edited():
    import pickle

    analysis = AnalysisConfig.from_mapping({"limits": {"event_bytes_max": 100_000}})
    with pytest.raises(TypeError):
        analysis.limits["event_bytes_max"] = -1
    with pytest.raises(TypeError):
        analysis.storage["synchronous"] = "OFF"
    assert analysis.limits["event_bytes_max"] == 100_000 and pickle.loads(pickle.dumps(analysis)) == analysis
    assert AnalysisConfig(limits=analysis.limits, storage=analysis.storage) == analysis
    assert AnalysisConfig.from_mapping(analysis.to_dict()) == analysis


def test_a_read_only_config_still_reads_copies_and_writes_as_json_as_a_dict_does():
    """json.dumps and dataclasses.asdict of a config worked before its mappings were made read-only."""
    import copy
    import dataclasses

    config, analysis = BudgetConfig.example(), AnalysisConfig()
    assert json.loads(json.dumps(config.policy)) == config.to_dict() and isinstance(config.policy, dict)
    assert json.loads(json.dumps(analysis.limits)) == analysis.to_dict()["limits"]
    assert dataclasses.asdict(config)["policy"] == config.to_dict() and copy.deepcopy(config) == config
    assert dataclasses.asdict(analysis)["storage"] == analysis.to_dict()["storage"]
    for edit in (lambda: config.policy.update(x=1), lambda: config.policy.setdefault("x", 1),
                 lambda: config.policy["action_costs"].pop("source.read_context"), lambda: analysis.limits.clear()):
        with pytest.raises(TypeError):
            edit()
    assert config == BudgetConfig.example() and analysis == AnalysisConfig()


@pytest.mark.parametrize("build, where", [
    (lambda: AnalysisConfig.from_mapping({"limits": {1: 2}}), "limits"),
    (lambda: AnalysisConfig(storage={("a",): 2}), "storage"),
    (lambda: AnalysisConfig(limits={None: 1}), "limits"),
    (lambda: BudgetConfig.from_mapping({1: 2}), "(top level)"),
    (lambda: BudgetConfig.from_mapping({None: 2}), "(top level)"),
    (lambda: BudgetConfig.from_mapping({"action_costs": {1: 2}}), "action_costs")])
def test_a_config_mapping_with_a_key_that_is_no_string_is_config_invalid(build, where):
    """A mapping built in Python (TOML keys are always text): a TypeError escaped while the refusal
    named the key."""
    with pytest.raises(LedgerError) as refused:
        build()
    assert refused.value.code == CONFIG_INVALID and refused.value.message.startswith(f"{where}: keys must be strings")


@pytest.mark.parametrize("config, data, message", [
    (BudgetConfig, {"novelty_mod": "atoms"}, "novelty_mod: unknown key (did you mean novelty_mode?)"),
    (BudgetConfig, {"novelty_mod": 5}, "novelty_mod: unknown key (did you mean novelty_mode?)"),
    (BudgetConfig, {"defualt_action_cost": 5.0}, "defualt_action_cost: unknown key (did you mean default_action_cost?)"),
    (BudgetConfig, {"test_costs": {"humman": "x"}}, "test_costs.humman: unknown key (did you mean human?)"),
    (BudgetConfig, {"test_costs": {"robot": 3}}, "test_costs.robot: unknown key"),
    (BudgetConfig, {"tabl": {"a": 1}}, "tabl: unknown key"),
    (AnalysisConfig, {"storage": {"synchronus": "NORMAL"}}, "storage.synchronus: unknown key (did you mean synchronous?)"),
    (AnalysisConfig, {"storage": {"synchronus": 1}}, "storage.synchronus: unknown key (did you mean synchronous?)"),
    (AnalysisConfig, {"limits": {"event_byte_max": "2MiB"}},
     "limits.event_byte_max: unknown key (did you mean event_bytes_max?)"),
    (AnalysisConfig, {"max_hypothesis": 3}, "max_hypothesis: unknown key (did you mean max_hypotheses?)"),
    (AnalysisConfig, {"unitz": "x"}, "unitz: unknown key"),
    # a quoted dotted key is one key, told from a key of a table; invisible characters are escaped
    (BudgetConfig, {"test_costs.human": 5}, '"test_costs.human": unknown key (a key of the table test_costs is '
     'written under [test_costs], or as test_costs.human)'),
    (AnalysisConfig, {"storage.busy_timeout_ms": 5}, '"storage.busy_timeout_ms": unknown key (a key of the table '
     'storage is written under [storage], or as storage.busy_timeout_ms)'),
    (BudgetConfig, {"action_costs.source.read_context": 3}, '"action_costs.source.read_context": unknown key (a key '
     'of the table action_costs is written under [action_costs], or as action_costs."source.read_context")'),
    # no table hint for a key that is no table's; letters of any alphabet shown as themselves
    (BudgetConfig, {"max_reward_bps.x": 3}, '"max_reward_bps.x": unknown key (did you mean max_reward_bps?)'),
    (BudgetConfig, {"test_costs": {"human.x": 3}}, 'test_costs."human.x": unknown key (did you mean human?)'),
    (AnalysisConfig, {"limits": {"event_bytes_max.x": 3}},
     'limits."event_bytes_max.x": unknown key (did you mean event_bytes_max?)'),
    (BudgetConfig, {"coût": 3}, '"coût": unknown key'),
    (BudgetConfig, {'a"b': 3}, '"a\\"b": unknown key'),
    (AnalysisConfig, {"storage": {"busy_timeout_ms\u200b": 1}},
     'storage."busy_timeout_ms\\u200b": unknown key (did you mean busy_timeout_ms?)'),
    (AnalysisConfig, {"storage": {"": 1}}, 'storage."": unknown key'),
    (BudgetConfig, {"": 1}, '"": unknown key'),
])
def test_an_unknown_config_key_is_called_unknown_whatever_its_value_naming_the_key_it_is_close_to(config, data,
                                                                                                  message):
    """A misspelt key with a text value was "must be an integer", with an integer value the schema's
    "Additional properties are not allowed": one refusal for both, before any value is judged."""
    with pytest.raises(LedgerError) as refused:
        config.from_mapping(data)
    assert (refused.value.code, refused.value.message, refused.value.details["key"]) == (
        CONFIG_INVALID, message, message.split(": unknown key")[0])
