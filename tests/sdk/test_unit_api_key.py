"""An API key that a gRPC header cannot carry is refused when the client is
made, in words, not when a call is sent (grpc's `ExecuteBatchError`, naming
no header)."""

from __future__ import annotations

import pytest

from sdk import AsyncClient


@pytest.mark.parametrize("key", ["clé", "a\nb", "a b", "tab\tkey"])
def test_a_key_a_header_cannot_carry_is_refused_in_words(key: str) -> None:
    with pytest.raises(ValueError, match="a character a gRPC header cannot carry"):
        AsyncClient("127.0.0.1:1", api_key=key)


def test_a_key_of_visible_ascii_is_taken() -> None:
    key = "weft.k_0123456789ab.Zm9v-YmFy_~"
    assert AsyncClient("127.0.0.1:1", api_key=key).api_key == key
