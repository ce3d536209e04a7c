"""`shell_script`: a value put into a shell command reaches the command as an
argument, whatever quoting the template has open around it, and whatever the
value holds; run by `/bin/sh` for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.builtins import (
    HttpNotAllowed,
    HttpPolicy,
    InvalidInput,
    ShellValue,
    shell,
    shell_script,
)

NASTY = [
    "world; id > {planted}",
    "$(id > {planted})",
    "`id > {planted}`",
    "' ; id > {planted}; echo '",
    '" ; id > {planted}; echo "',
    "a\nid > {planted}",
    "\\",
    "*",
]


@pytest.mark.parametrize("value", NASTY)
@pytest.mark.parametrize(
    ("before", "after", "shows"),
    [
        ("printf '%s' ", "", "{value}"),
        ('printf "%s" "hello ', '!"', "hello {value}!"),
        ("printf '%s' 'hello ", "!'", "hello {value}!"),
        ("printf '%s' \\'", "", "'{value}"),  # an escaped quote opens nothing
        ("printf '%s' \"it's ", '"', "it's {value}"),  # a ' inside "…" opens nothing
    ],
    ids=["unquoted", "double-quoted", "single-quoted", "escaped-quote", "quote-in-double"],
)
async def test_a_value_is_data_in_every_quoting(
    value: str, before: str, after: str, shows: str, tmp_path: Path
) -> None:
    planted = tmp_path / "planted"
    text = value.format(planted=planted)
    command, args = shell_script([before, ShellValue(text), after])
    assert args == [text]
    result = await shell({"command": command, "args": args})
    assert result["stdout"] == shows.format(value=text)
    assert not planted.exists()


async def test_values_are_numbered_in_order() -> None:
    command, args = shell_script(["printf '%s|' ", ShellValue("a b"), " ", ShellValue("")])
    assert (command, args) == ('printf \'%s|\' "${1}" "${2}"', ["a b", ""])
    assert (await shell({"command": command, "args": args}))["stdout"] == "a b||"


async def test_args_are_text_numbers_or_booleans() -> None:
    result = await shell({"command": 'printf "%s," "$@"', "args": ["x", 3, True]})
    assert result["stdout"] == "x,3,true,"
    with pytest.raises(InvalidInput, match="args must be a list"):
        await shell({"command": "true", "args": "x"})
    with pytest.raises(InvalidInput, match="must be text or a number"):
        await shell({"command": "true", "args": [{"a": 1}]})


# -- weft.http: which addresses a policy lets a runner connect to --------------------------


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # a cloud's metadata service
        "100.64.0.1",
        "0.0.0.0",
        "224.0.1.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1%eth0",
        "fd00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
    ],
)
def test_any_public_host_is_no_private_address(address: str) -> None:
    policy = HttpPolicy.of(["*"])
    with pytest.raises(HttpNotAllowed, match="a private or special address"):
        policy.check_address("service.example", address)
    HttpPolicy.of(["service.example"]).check_address("service.example", address)
    HttpPolicy.of(["*", address.split("%")[0]]).check_address("other.example", address)


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"])
def test_a_public_address_is_reachable_with_any_public_host(address: str) -> None:
    HttpPolicy.of(["*"]).check_address("web.example", address)


def test_listed_hosts_are_compared_as_spelled_by_urls() -> None:
    policy = HttpPolicy.of(["API.Example.", "[::1],10.0.0.1"])
    assert policy.hosts == {"api.example", "::1", "10.0.0.1"}
    for url in ["https://api.example/x", "http://API.EXAMPLE.:8080/", "http://[::1]:80/"]:
        policy.check_url(url)
    with pytest.raises(HttpNotAllowed, match=r"other\.example is not one of the hosts"):
        policy.check_url("https://other.example/")
    with pytest.raises(HttpNotAllowed, match=r"weft\.http is off"):
        HttpPolicy.of([]).check_url("https://api.example/")
