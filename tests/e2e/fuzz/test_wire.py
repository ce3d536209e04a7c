"""Request bytes that are no protobuf message of the RPC's type: invalid UTF-8
in a string field, a truncated field, a field of the wrong wire type, garbage.

The process survives, nothing is appended, and the answer is INVALID_ARGUMENT
(the server's tolerant deserializer, `orchestrator/api/handlers.py`), never
grpc's UNKNOWN with Python's exception text.
"""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdk.api.weft.v1 import service_pb2 as s
from tests.e2e.fuzz import strategies as fz
from tests.e2e.fuzz.target import SERVER_FAULTS, FuzzServer

SERVICE = s.DESCRIPTOR.services_by_name["WorkflowService"]
RPCS = [m.name for m in SERVICE.methods]
EXAMPLES = 40


def field(number: int, wire_type: int, payload: bytes = b"") -> bytes:
    """One protobuf field: its key, then for length-delimited fields the length."""
    key = bytes([number << 3 | wire_type])
    if wire_type == 2:
        return key + _varint(len(payload)) + payload
    return key + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


MALFORMED = [
    field(2, 2, b"\xff\xfe"),  # a string field (every request's field 2 or 1) not UTF-8
    field(1, 2, b"\xc3\x28"),
    field(1, 2, b"\xed\xa0\x80"),  # an encoded surrogate
    field(2, 2, b"abc")[:-1],  # truncated
    b"\x0a\x05",  # a length past the end
    field(1, 5),  # a 32-bit field cut short
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a varint key past 64 bits
    b"\x00",  # field number 0
]


def bodies() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from(MALFORMED),
        st.binary(min_size=1, max_size=24),
        st.tuples(st.sampled_from(MALFORMED), st.binary(max_size=8)).map(lambda t: t[1] + t[0]),
    )


def check_raw(server: FuzzServer, rpc: str, body: bytes) -> grpc.StatusCode:
    runs = server.runs()
    out = server.call_raw(rpc, body)
    if out.code != grpc.StatusCode.OK:
        assert server.runs() == runs, f"refused {rpc} started a run"
    server.assert_alive()
    return out.code


@pytest.mark.parametrize("body", MALFORMED)
def test_bytes_that_do_not_parse_leave_the_server_up_and_change_nothing(
    fuzz_server: FuzzServer, body: bytes
) -> None:
    for rpc in RPCS:
        check_raw(fuzz_server, rpc, body)


def test_bytes_that_do_not_parse_are_invalid_argument(fuzz_server: FuzzServer) -> None:
    @fz.fuzz_settings(EXAMPLES)
    @given(rpc=st.sampled_from(RPCS), body=bodies())
    def fuzz(rpc: str, body: bytes) -> None:
        code = check_raw(fuzz_server, rpc, body)
        assert code not in SERVER_FAULTS, f"{rpc} answered {code.name} to {body!r}"

    fuzz()
