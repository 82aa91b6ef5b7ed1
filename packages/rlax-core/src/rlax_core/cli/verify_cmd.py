"""``rlax verify --backend NAME INPUT.jsonl [--out OUTPUT.jsonl] [--workers N] [--keep-going]``.

Each input line is ``{"id": ..., "problem": {...}, "completion": "..."}``; each output
line is ``{"id": ..., "verdict": "AC", "reward": 1.0, "tests": [...], "message": ...}``,
in input order. A problem's ``kind`` names the judge that decides it (``code``,
``math``, or any installed judge); ``--backend`` names the sandbox that code judges run
programs in. Everything is built through the plugin registry.

Invalid input (a line that is not a JSON object, a missing problem or completion, a
kind no installed judge decides, a problem its judge cannot read) is not a sandbox
failure: it gets the IE verdict, with a message saying what is wrong. Every line is read
before anything is judged; if any is invalid, the command lists them and exits 2
without judging, unless ``--keep-going`` asks to judge the rest anyway (IE lines are
written too, and the exit status is still 2). One completion that breaks its judge gets
SE (:func:`~rlax_core.judging.judge_isolated`); the lines around it keep their verdicts.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from rlax_core.contracts.verifier import Judge
from rlax_core.errors import ConfigError
from rlax_core.judging import judge_isolated
from rlax_core.plugins.manager import load_registry
from rlax_core.plugins.registry import BuildContext, Registry
from rlax_core.types.verdict import Verdict, VerdictStatus


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``verify`` subcommand."""
    sub = commands.add_parser(
        "verify",
        help="judge a JSONL file of completions",
        description="Judge each line {id, problem, completion} of a JSONL file and write "
        "{id, verdict, reward, tests} lines in input order.",
    )
    sub.add_argument("input", type=Path, help="input JSONL file")
    sub.add_argument("--backend", default="local", help="sandbox for code (default: local)")
    sub.add_argument("--out", type=Path, help="output JSONL file (default: stdout)")
    sub.add_argument("--workers", type=int, help="programs run at the same time")
    sub.add_argument(
        "--keep-going",
        action="store_true",
        help="judge the valid lines even if some are invalid (they get IE; exit status 2)",
    )
    sub.add_argument("--chunk", type=int, default=256, help=argparse.SUPPRESS)
    sub.set_defaults(handler=run)


_LISTED = 20  # invalid lines listed before the command gives up


@dataclass
class _Item:
    """One input line: either a (kind, problem, completion) to judge or a verdict already."""

    id: Any
    where: str = ""  # "line N", for messages
    kind: str = ""
    problem: dict[str, Any] | None = None
    completion: str = ""
    verdict: Verdict | None = None


def run(args: argparse.Namespace) -> int:
    """Judges the input file; exit 0 when no line was invalid input (SE verdicts included)."""
    if not args.input.is_file():
        raise ConfigError(f"input file {args.input} does not exist")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (got {args.workers})")
    registry = load_registry()
    sandbox = _sandbox_config(registry, args.backend, args.workers)
    with args.input.open(encoding="utf-8", errors="replace") as handle:
        items = [_parse_line(n, line) for n, line in enumerate(handle, 1) if line.strip()]
    judge_kinds = set(registry.names("judge"))
    for item in items:
        if item.verdict is None and item.kind not in judge_kinds:
            item.verdict = _invalid(
                item.id,
                f"{item.where}: no judge for problem kind {item.kind!r} (installed judges: "
                f"{', '.join(sorted(judge_kinds)) or 'none'})",
            ).verdict
    invalid = [i for i in items if i.verdict is not None]
    if invalid and not args.keep_going:
        for item in invalid[:_LISTED]:
            print(f"invalid: {item.verdict.message}", file=sys.stderr)  # type: ignore[union-attr]
        more = f" (and {len(invalid) - _LISTED} more)" if len(invalid) > _LISTED else ""
        raise ConfigError(
            f"{args.input}: {len(invalid)} of {len(items)} lines are invalid{more}; nothing "
            "was judged. Fix them, or pass --keep-going to judge the rest (they get IE)"
        )
    counts: Counter[str] = Counter()
    judges = _Judges(registry, BuildContext(registry, sandbox=sandbox))
    with ExitStack() as stack:
        stack.callback(judges.close)
        out: IO[str] = stack.enter_context(args.out.open("w")) if args.out else sys.stdout
        progress = _progress(len(items))
        stack.enter_context(progress) if progress else None
        task = progress.add_task("judging", total=len(items)) if progress else None
        for chunk in _chunks(items, max(1, args.chunk)):
            judges.judge(chunk)
            for item in chunk:
                assert item.verdict is not None
                counts[item.verdict.status.value] += 1
                out.write(json.dumps(_output(item)) + "\n")
            out.flush()
            if progress is not None and task is not None:
                progress.advance(task, len(chunk))
    summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    print(f"judged {len(items)} completions: {summary or 'none'}", file=sys.stderr)
    return 2 if counts[VerdictStatus.IE.value] else 0


def _sandbox_config(registry: Registry, backend: str, workers: int | None) -> Any:
    registration = registry.get("sandbox", backend)  # PluginError (exit 2) names what exists
    fields = registration.config_cls.model_fields
    settings = {"workers": workers} if workers is not None and "workers" in fields else {}
    return registration.config_cls(**settings)


def _parse_line(number: int, line: str) -> _Item:
    where = f"line {number}"
    try:
        record = json.loads(line)
    except ValueError as exc:
        return _invalid(None, f"{where}: not JSON ({exc})")
    if not isinstance(record, dict):
        return _invalid(None, f"{where}: expected an object, got {type(record).__name__}")
    item_id = record.get("id")
    problem, completion = record.get("problem"), record.get("completion")
    if not isinstance(problem, dict):
        return _invalid(item_id, f"{where}: 'problem' must be an object")
    if not isinstance(completion, str):
        return _invalid(item_id, f"{where}: 'completion' must be a string")
    kind = problem.get("kind")
    if not isinstance(kind, str) or not kind:
        return _invalid(item_id, f"{where}: the problem has no 'kind' (e.g. 'code', 'math')")
    return _Item(item_id, where, kind, problem, completion)


def _invalid(item_id: Any, message: str) -> _Item:
    return _Item(item_id, verdict=Verdict(status=VerdictStatus.IE, reward=None, message=message))


class _Judges:
    """One judge per problem kind, built on first use through the registry."""

    def __init__(self, registry: Registry, context: BuildContext) -> None:
        self.registry = registry
        self.context = context
        self.built: dict[str, Judge] = {}

    def judge(self, items: list[_Item]) -> None:
        """Gives every item without a verdict one, judging each kind in one call."""
        by_kind: dict[str, list[_Item]] = {}
        for item in items:
            if item.verdict is None:
                by_kind.setdefault(item.kind, []).append(item)
        for kind, group in by_kind.items():
            judge = self._get(kind)
            problems = [i.problem or {} for i in group]
            verdicts = judge_isolated(judge, problems, [i.completion for i in group])
            for item, verdict in zip(group, verdicts, strict=True):
                item.verdict = verdict

    def _get(self, kind: str) -> Judge:
        if kind not in self.built:
            registration = self.registry.get("judge", kind)
            self.built[kind] = self.registry.build("judge", registration.config_cls(), self.context)
        return self.built[kind]

    def close(self) -> None:
        """Closes the judges built (and so their sandboxes)."""
        for judge in self.built.values():
            judge.close()


def _chunks(items: list[_Item], size: int) -> Iterator[list[_Item]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _output(item: _Item) -> dict[str, Any]:
    verdict = item.verdict
    assert verdict is not None
    return {
        "id": item.id,
        "verdict": verdict.status.value,
        "reward": verdict.reward,
        "tests": [
            {"verdict": t.verdict.value, "time_s": t.time_s, "memory_mb": t.memory_mb}
            for t in verdict.tests
        ],
        "message": verdict.message,
    }


def _progress(total: int) -> Progress | None:
    console = Console(stderr=True)
    if not console.is_terminal or total == 0:
        return None
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=console,
    )  # fmt: skip
