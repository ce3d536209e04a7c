"""The figures of one chaos mode, as `make chaos` prints them."""

from __future__ import annotations

from chaos.run import Figures

PROBLEMS_SHOWN = 10


def report(f: Figures) -> list[str]:
    v = f.verdict
    kills = ", ".join(f"{kind} {f.kills[kind]}" for kind in ("server", "decider", "runner"))
    lines = [
        f"mode {f.mode}: {v.workflows} workflows in {f.seconds:.0f} s ({f.pg_note})",
        f"  kill -9: {kills}; PostgreSQL restarts {f.pg_restarts}",
        f"  events checked {v.events}; activity attempts {v.activity_attempts};"
        f" signals sent {f.signals_sent}, duplicates included (each must be recorded once)",
        f"  lost {v.lost}, duplicated {v.duplicated}, stuck {v.stuck}, wrong {v.wrong};"
        f" unexpected exits {len(f.unexpected_exits)}; driver errors {len(f.driver_errors)}",
    ]
    for text in (v.problems + f.unexpected_exits + f.driver_errors)[:PROBLEMS_SHOWN]:
        lines.append("  ! " + text.replace("\n", "\n    "))
    return lines
