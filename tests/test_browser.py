"""`ledger serve` in a real browser (docs/browse.md): the demo case served on a free port, its pages
loaded in headless Chromium, the DOM Chromium dumps checked and screenshots saved.

Marker `browser` (left out of the default run): `.ci/browser VENV` installs Chromium from Debian's
packages when it is missing and runs `pytest -m browser`. Screenshots go to $LEDGER_SCREENSHOT_DIR
(default: the test's temporary folder)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ledger import run_demo

pytestmark = pytest.mark.browser
pytest.importorskip("datasette")

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars")


def chromium() -> str:
    found = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("headless Chromium is not installed (apt-get install chromium; .ci/browser does it)")
    return found


def browse(url: str, profile: Path, *extra: str) -> str:
    done = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture
def served(tmp_path):
    """`ledger serve` on the demo case on a free port: (base URL, server process); stopped by its pid."""
    case, _, _ = run_demo(tmp_path / "demo", echo=lambda text: None)
    server = subprocess.Popen([sys.executable, "-m", "ledger_cli", "serve", str(case), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.1:\d+/)", line)
        assert match, line + server.stderr.read()
        yield match.group(1), server
    finally:
        if server.poll() is None:
            os.kill(server.pid, signal.SIGINT)
            try:
                server.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.communicate()


PAGES = {
    # screenshot name: (path, texts the DOM must show)
    "case": ("BUG-20", ["BUG-20 (EVALUATING)", "Read the views first", "balances_recomputed",
                        "remaining_units_history.svg", "raw history", "Spend by action type",
                        "Refusals at a limit, and accounts ended, with reasons", "Scope usage near its limit"]),
    "view-balances": ("BUG-20/balances", ["units the account started with [units]",
                                          "consecutive closings that taught little: settles whose",
                                          "abandons the hypothesis (docs/concepts.md, Rules, exactly) [closings]",
                                          "restock() adds the restocked quantity twice",
                                          "abandoned_low_information_gain", "budget_exhausted"]),
    "query-abandoned": ("BUG-20/abandoned_hypotheses", ["Hypotheses stopped (exhausted, abandoned, rejected) and why", "low_information_streak",
                                                        "remaining_below_floor", "test_restock expects the wrong total"]),
    "query-evidence": ("BUG-20/evidence_by_novelty?hypothesis_id=H1", ["Evidence by novelty", "E000001",
                                                                       "E000003", "E000002"]),
    "picture": ("BUG-20/remaining_units_history.svg?hypothesis_id=", ['data-label="H1"', 'data-label="H4"',
                                                                      "H3: 4", "remaining units", "event seq"]),
}


def test_the_demo_case_browsed_in_chromium_shows_its_pages_texts_and_picture(served, tmp_path):
    url, server = served
    shots = Path(os.environ.get("LEDGER_SCREENSHOT_DIR") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    profile = tmp_path / "chromium-profile"
    for name, (path, texts) in PAGES.items():
        dom = browse(url + path, profile, "--dump-dom")
        for text in texts:
            assert text in dom, f"{path}: {text!r} not in the page"
        shot = shots / f"{name}.png"
        size = "760,360" if name == "picture" else "1200,900"
        browse(url + path, profile, f"--window-size={size}", f"--screenshot={shot}")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5000, shot
        print(f"screenshot: {shot}")
    balances = browse(url + "BUG-20/balances", profile, "--dump-dom")
    # the column descriptions come before the table; each row's remaining units are those of the demo
    assert balances.index("[units]") < balances.index("<table")
    assert re.search(r"H3</td>.*?>4<", balances, flags=re.DOTALL)
    os.kill(server.pid, signal.SIGINT)
    out, err = server.communicate(timeout=30)
    assert server.returncode == 0 and out.strip().endswith("stopped") and "Traceback" not in err, err
