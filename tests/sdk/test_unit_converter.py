"""`PayloadConverter`: Python values to JSON payloads and back, typed by hints."""

from __future__ import annotations

import base64
import enum
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Optional

import pytest

from sdk import PayloadConverter
from sdk.api.weft.v1 import common_pb2 as c
from sdk.converter import DEFAULT_CONVERTER

CONV = PayloadConverter()
U1 = uuid.UUID("12345678-1234-5678-1234-567812345678")
U2 = uuid.UUID("87654321-4321-8765-4321-876543218765")
WHEN = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass
class Address:
    street: str
    zip: str
    since: date | None = None


@dataclass
class Customer:
    id: uuid.UUID
    name: str
    address: Address
    balance: Decimal
    joined: datetime
    tags: list[str] = field(default_factory=list)
    color: Color = Color.RED


@dataclass(frozen=True)
class Line:
    sku: str
    qty: int
    price: Decimal


@dataclass
class Order:
    lines: list[Line]
    by_sku: dict[str, Line]
    owner: Customer | None = None
    note: Optional[str] = None  # noqa: UP045 (Optional on purpose)


CUSTOMER = Customer(
    id=U1,
    name="Ann",
    address=Address("Main St 1", "12345", date(2020, 2, 29)),
    balance=Decimal("12345678901234567890.123456789"),
    joined=WHEN,
    tags=["vip"],
    color=Color.BLUE,
)


def wire(value: Any) -> Any:
    """What `encode` writes, as parsed JSON (and check the payload's envelope)."""
    payload = CONV.encode(value)
    assert payload.encoding == "json"
    return json.loads(payload.data)


# -- encode ----------------------------------------------------------------------------

ENCODE_CASES = [
    ("none", None, None),
    ("plain", {"a": [1, 2.5, True, "x"]}, {"a": [1, 2.5, True, "x"]}),
    ("unicode", "héllo ✓", "héllo ✓"),
    ("datetime", WHEN, "2026-03-04T05:06:07.891011+00:00"),
    ("naive-datetime", datetime(2026, 1, 1, 12), "2026-01-01T12:00:00"),
    (
        "offset-datetime",
        datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2))),
        "2026-01-01T12:00:00+02:00",
    ),
    ("date", date(2020, 2, 29), "2020-02-29"),
    ("time", time(23, 59, 58, 123), "23:59:58.000123"),
    ("uuid", U1, "12345678-1234-5678-1234-567812345678"),
    ("decimal", Decimal("0.1000000000000000000000000001"), "0.1000000000000000000000000001"),
    ("decimal-exp", Decimal("1E+3"), "1E+3"),
    ("enum", Color.BLUE, "blue"),
    ("int-enum", Level.HIGH, 2),
    ("set", {3, 1, 2}, [1, 2, 3]),
    ("frozenset", frozenset({5}), [5]),
    ("tuple", (1, "a"), [1, "a"]),
    ("bytes", b"\x00\xffhi", "AP9oaQ=="),
    ("timedelta", timedelta(minutes=1, milliseconds=500), 60.5),
    ("address", Address("S", "Z"), {"street": "S", "zip": "Z", "since": None}),
    (
        "nested",
        CUSTOMER,
        {
            "id": "12345678-1234-5678-1234-567812345678",
            "name": "Ann",
            "address": {"street": "Main St 1", "zip": "12345", "since": "2020-02-29"},
            "balance": "12345678901234567890.123456789",
            "joined": "2026-03-04T05:06:07.891011+00:00",
            "tags": ["vip"],
            "color": "blue",
        },
    ),
    (
        "in-containers",
        {"ids": [U1, U2], "at": {"d": date(2026, 1, 2)}},
        {
            "ids": ["12345678-1234-5678-1234-567812345678", "87654321-4321-8765-4321-876543218765"],
            "at": {"d": "2026-01-02"},
        },
    ),
]


@pytest.mark.parametrize(
    ("value", "expected"), [c[1:] for c in ENCODE_CASES], ids=[c[0] for c in ENCODE_CASES]
)
def test_encode(value: Any, expected: Any) -> None:
    got = wire(value)
    assert (sorted(got) if isinstance(value, set) else got) == expected


def test_encode_is_compact_utf8() -> None:
    assert CONV.encode({"a": [1, "é"]}).data == '{"a":[1,"é"]}'.encode()
    assert CONV.encode(None).data == b"null"


@pytest.mark.parametrize(
    ("value", "name"),
    [(object(), "object"), (1 + 2j, "complex"), ({"deep": [range(3)]}, "range"), (Address, "type")],
)
def test_unknown_types_raise_type_error_naming_the_type(value: Any, name: str) -> None:
    with pytest.raises(TypeError, match=f"cannot encode {name} as JSON"):
        CONV.encode(value)


# -- decode ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [None, c.Payload(), c.Payload(encoding="json"), c.Payload(data=b"", encoding="binary/x")],
    ids=["none", "default", "json-empty", "other-empty"],
)
def test_empty_payload_decodes_to_none(payload: c.Payload | None) -> None:
    assert CONV.decode(payload) is None
    assert CONV.decode(payload, Customer) is None


@pytest.mark.parametrize("encoding", ["binary/protobuf", "msgpack", "JSON"])
def test_foreign_encoding_returns_base64(encoding: str) -> None:
    raw = b"\x00\x01\xfe{"
    got = CONV.decode(c.Payload(data=raw, encoding=encoding), Customer)
    assert got == {"encoding": encoding, "data": base64.b64encode(raw).decode()}
    assert got["data"] == "AAH+ew=="


def test_missing_encoding_is_read_as_json() -> None:
    assert CONV.decode(c.Payload(data=b'{"a":1}')) == {"a": 1}


def test_decode_without_hint_gives_plain_json() -> None:
    assert CONV.decode(CONV.encode(CUSTOMER))["balance"] == "12345678901234567890.123456789"
    assert CONV.decode(CONV.encode(U1)) == str(U1)


ROUND_TRIPS: list[tuple[str, Any, Any]] = [
    ("customer", CUSTOMER, Customer),
    ("datetime", WHEN, datetime),
    ("naive-datetime", datetime(2026, 1, 1, 12, 30), datetime),
    ("date", date(1999, 12, 31), date),
    ("time", time(1, 2, 3, 4), time),
    ("uuid", U2, uuid.UUID),
    ("decimal", Decimal("3.14159265358979323846264338327950288"), Decimal),
    ("decimal-trailing-zero", Decimal("1.10"), Decimal),
    ("enum", Color.RED, Color),
    ("int-enum", Level.LOW, Level),
    ("bytes", bytes(range(256)), bytes),
    ("timedelta", timedelta(days=1, microseconds=250_000), timedelta),
    ("list-uuid", [U1, U2], list[uuid.UUID]),
    ("set-uuid", {U1, U2}, set[uuid.UUID]),
    ("frozenset-int", frozenset({1, 2}), frozenset[int]),
    ("tuple-ellipsis", (U1, U2), tuple[uuid.UUID, ...]),
    ("dict-decimal", {"a": Decimal("0.30"), "b": Decimal("-1E-20")}, dict[str, Decimal]),
    ("optional-datetime", WHEN, Optional[datetime]),  # noqa: UP045
    ("optional-none", None, Optional[datetime]),  # noqa: UP045
    ("pipe-optional", date(2026, 5, 6), date | None),
    ("list-of-dataclass", [Address("a", "1"), Address("b", "2", date(2001, 1, 1))], list[Address]),
    ("any", {"x": [1, "2"]}, Any),
    ("bare-list", [1, "a"], list),
    (
        "order",
        Order(
            lines=[Line("x", 2, Decimal("9.99"))],
            by_sku={"y": Line("y", 1, Decimal("0.01"))},
            owner=CUSTOMER,
            note="rush",
        ),
        Order,
    ),
    ("order-defaults", Order(lines=[], by_sku={}), Order),
]


@pytest.mark.parametrize(
    ("value", "hint"), [c[1:] for c in ROUND_TRIPS], ids=[c[0] for c in ROUND_TRIPS]
)
def test_round_trip_rebuilds_the_typed_value(value: Any, hint: Any) -> None:
    again = CONV.decode(CONV.encode(value), hint)
    assert again == value
    assert type(again) is type(value)


def test_decimal_keeps_every_digit_and_the_exponent() -> None:
    value = Decimal("12345678901234567890.000000000000000000010")
    again = CONV.decode(CONV.encode(value), Decimal)
    assert str(again) == "12345678901234567890.000000000000000000010"
    assert again.as_tuple() == value.as_tuple()


def test_nested_dataclass_fields_have_their_types() -> None:
    again = CONV.decode(CONV.encode(CUSTOMER), Customer)
    assert isinstance(again.address, Address)
    assert isinstance(again.address.since, date)
    assert isinstance(again.id, uuid.UUID)
    assert isinstance(again.balance, Decimal)
    assert again.joined.tzinfo is not None and again.joined == WHEN
    assert again.color is Color.BLUE


def test_dataclass_ignores_unknown_fields_and_uses_defaults() -> None:
    got = CONV.from_json({"street": "S", "zip": "Z", "extra": 1}, Address)
    assert got == Address("S", "Z", None)


def test_dataclass_missing_required_field_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="zip"):
        CONV.from_json({"street": "S"}, Address)


@pytest.mark.parametrize(
    ("value", "hint", "expected"),
    [
        ("2026-01-01T00:00:00+00:00", datetime | int, datetime(2026, 1, 1, tzinfo=UTC)),
        ("not a date", Optional[datetime], "not a date"),  # noqa: UP045  (kept as given)
        ([1, 2], dict[str, int], [1, 2]),  # shape does not match: kept
        ({"a": 1}, list[int], {"a": 1}),
        (5, Any, 5),
        (None, Customer, None),
        ("x", None, "x"),
    ],
)
def test_from_json_edge_cases(value: Any, hint: Any, expected: Any) -> None:
    assert CONV.from_json(value, hint) == expected


@pytest.mark.parametrize(
    ("value", "hint", "error"),
    [
        ("nope", uuid.UUID, ValueError),
        ("purple", Color, ValueError),
        ("x.y", Decimal, InvalidOperation),
    ],
)
def test_from_json_invalid_values_raise(value: Any, hint: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        CONV.from_json(value, hint)


def test_heterogeneous_tuple_hint() -> None:
    got = CONV.from_json(["x", str(U1), "2026-01-01"], tuple[str, uuid.UUID, date])
    assert got == ("x", U1, date(2026, 1, 1))


def test_default_converter_is_a_payload_converter() -> None:
    assert isinstance(DEFAULT_CONVERTER, PayloadConverter)


class Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and other.cents == self.cents

    __hash__ = None  # type: ignore[assignment]


class MoneyConverter(PayloadConverter):
    def to_json(self, value: Any) -> Any:
        if isinstance(value, Money):
            return {"cents": value.cents}
        return super().to_json(value)

    def from_json(self, value: Any, hint: Any) -> Any:
        if hint is Money:
            return Money(value["cents"])
        return super().from_json(value, hint)


def test_subclass_hooks_teach_more_types() -> None:
    conv = MoneyConverter()
    payload = conv.encode({"price": Money(250), "at": WHEN})
    assert json.loads(payload.data) == {"price": {"cents": 250}, "at": WHEN.isoformat()}
    assert conv.decode(conv.encode([Money(1)]), list[Money]) == [Money(1)]
    with pytest.raises(TypeError, match="cannot encode Money"):
        CONV.encode(Money(1))


class DuckModel:
    """Quacks like a pydantic v2 model (model_dump / model_validate)."""

    def __init__(self, x: int) -> None:
        self.x = x

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        assert mode == "json"
        return {"x": self.x}

    @classmethod
    def model_validate(cls, value: Any) -> DuckModel:
        return cls(value["x"])


def test_model_protocol_without_pydantic() -> None:
    assert wire(DuckModel(3)) == {"x": 3}
    assert CONV.decode(CONV.encode(DuckModel(4)), DuckModel).x == 4


def test_pydantic_v2_models() -> None:
    pydantic = pytest.importorskip("pydantic", minversion="2")

    class Item(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        id: uuid.UUID
        price: Decimal
        at: datetime
        tags: set[str] = set()

    item = Item(id=U1, price=Decimal("1.50"), at=WHEN, tags={"a"})
    assert wire(item) == {
        "id": str(U1),
        "price": "1.50",
        "at": "2026-03-04T05:06:07.891011Z",
        "tags": ["a"],
    }
    assert CONV.decode(CONV.encode(item), Item) == item
    assert CONV.decode(CONV.encode([item]), list[Item]) == [item]
