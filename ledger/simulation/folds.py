"""How runs are dealt into held-out folds and bootstrap resamples: by task, so that a task's runs
stay together (docs/simulate.md, "Held-out folds" and "Folds of whole tasks").

Runs of one task by several agents or models are imported side by side with a run prefix of each
one's own (``ledger runs import --run-prefix gpt5.``): ``gpt5.astropy__astropy-13033`` and
``claude.astropy__astropy-13033`` are one task's runs. Given those prefixes, a run's task is its id
with the longest of them that starts it taken off; a run id no prefix starts, or that is nothing but
a prefix, names its task whole (so ``X`` and ``gpt5.X`` are one task). Without prefixes every run is
a task of its own, and the folds and resamples are exactly those dealt from the runs.
"""

from __future__ import annotations

import random
from typing import Any, Iterable, Sequence

from ..ground import errors as E
from ..ground.arguments import check_iterable
from ..ground.errors import LedgerError, repr_shown

#: Held-out folds when ``--folds`` is not given (fewer when there are fewer tasks).
DEFAULT_FOLDS = 5


def task_prefixes(value: Any) -> tuple[str, ...]:
    """``value`` (None, or any iterable of non-empty ``str`` but a ``str`` itself: a list, a tuple, a
    set, a generator) as a tuple, each prefix once, in the order given (a set's order changes nothing:
    a run's task is the same whichever prefix is listed first); ``INVALID_ARGUMENT`` for another shape
    or an empty prefix."""
    if value is None:
        return ()
    prefixes: list[str] = []
    for prefix in check_iterable(value, "task prefixes", "a list of run-id prefixes (str)"):
        if not isinstance(prefix, str) or not prefix:
            raise LedgerError(E.INVALID_ARGUMENT, "a task prefix must be the non-empty text put before run ids "
                              f"(ledger runs import --run-prefix), got {repr_shown(prefix, 80)}")
        if prefix not in prefixes:
            prefixes.append(prefix)
    return tuple(prefixes)


def check_prefixes_start(prefixes: Sequence[str], run_ids: Iterable[str]) -> None:
    """``INVALID_ARGUMENT`` for a prefix that starts none of ``run_ids`` followed by more: a mistyped
    prefix would otherwise group nothing without a word."""
    ids = list(run_ids)
    for prefix in prefixes:
        if not any(run.startswith(prefix) and len(run) > len(prefix) for run in ids):
            shown = ", ".join(repr_shown(run, 60) for run in sorted(ids)[:3]) or "none"
            said = "is a whole run id and starts no other" if prefix in ids else "starts no run id"
            raise LedgerError(E.INVALID_ARGUMENT, f"--task-prefix {repr_shown(prefix, 80)} {said} (of "
                              f"{len(ids)} run(s): {shown}{', …' if len(ids) > 3 else ''}); give the prefix the "
                              "runs were imported with (ledger runs import --run-prefix)", prefix=prefix)


def task_of(run_id: str, prefixes: Sequence[str]) -> str:
    """``run_id`` without the longest of ``prefixes`` that starts it and leaves something."""
    longest = max((p for p in prefixes if run_id.startswith(p) and len(run_id) > len(p)), key=len, default="")
    return run_id[len(longest):]


def by_task(run_ids: Iterable[str], prefixes: Sequence[str]) -> list[list[str]]:
    """The runs of each task, each list sorted, the tasks in the order of their first runs: when no
    two runs share a task, the runs in their own order, so that prefixes grouping nothing deal the
    folds and resamples exactly as no prefixes do."""
    groups: dict[str, list[str]] = {}
    for run in sorted(run_ids):
        groups.setdefault(task_of(run, prefixes), []).append(run)
    return list(groups.values())  # in the order of each task's first run


def default_folds(folds: int | None, run_ids: Sequence[str], prefixes: Sequence[str] = ()) -> int:
    """``folds`` as given, or when None :data:`DEFAULT_FOLDS`, or one per task when there are fewer
    tasks (:func:`by_task`), none for one task."""
    if folds is not None:
        return folds
    tasks = len(by_task(run_ids, prefixes))
    return min(DEFAULT_FOLDS, tasks) if tasks >= 2 else 0


def fold_parts(run_ids: Sequence[str], folds: int, seed: int, prefixes: Sequence[str] = ()) -> list[list[str]]:
    """The tasks of ``run_ids`` (:func:`by_task`) shuffled with ``seed`` and dealt into ``folds``
    folds; each fold is the sorted runs of its tasks. Without prefixes, the runs themselves dealt."""
    groups = by_task(run_ids, prefixes)
    random.Random(seed).shuffle(groups)
    return [sorted(run for group in groups[k::folds] for run in group) for k in range(folds)]


def resample(rng: random.Random, groups: Sequence[Sequence[str]]) -> list[str]:
    """As many tasks as ``groups`` holds, drawn with replacement, each bringing all its runs."""
    return [run for group in rng.choices(groups, k=len(groups)) for run in group]
