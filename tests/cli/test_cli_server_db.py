"""`weft server --db URL` with a password in the URL says, in one line on
stderr, that `ps` shows it and that WEFT_DATABASE_URL does not (issue 15,
finding 10). The database here is a closed port: the server fails to connect
right after the warning, which is all these tests need."""

from __future__ import annotations

import subprocess

import pytest

from tests.cli.support import REPO, clean_env
from tests.serverproc import WEFT, free_port

WARNING = "weft server: warning: the --db URL holds a password"
CLOSED = "127.0.0.1:1"


def server(args: list[str], env: dict[str, str] | None = None) -> list[str]:
    """`weft server ARGS` against an unreachable database; its stderr lines."""
    done = subprocess.run(
        [
            str(WEFT),
            "server",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--metrics-listen",
            "",
            *args,
        ],
        capture_output=True,
        text=True,
        env={**clean_env(), **(env or {})},
        cwd=REPO,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stderr
    return done.stderr.splitlines()


@pytest.mark.parametrize(
    "url",
    [f"postgresql://weft:s3cret@{CLOSED}/weft", f"postgresql://weft@{CLOSED}/weft?password=s3cret"],
    ids=["in-userinfo", "in-query"],
)
def test_a_password_in_db_is_warned_of(url: str) -> None:
    lines = server(["--db", url])
    warnings = [line for line in lines if line.startswith(WARNING)]
    assert len(warnings) == 1, lines
    assert "`ps`" in warnings[0] and "WEFT_DATABASE_URL" in warnings[0]
    assert "s3cret" not in warnings[0]


def test_no_warning_without_a_password_or_from_the_variable() -> None:
    assert not any("warning" in line for line in server(["--db", f"postgresql://weft@{CLOSED}/w"]))
    env = {"WEFT_DATABASE_URL": f"postgresql://weft:s3cret@{CLOSED}/weft"}
    assert not any("warning" in line for line in server([], env))
