"""The carrier's system, outside Weft: it tells a waiting order that the parcel
was delivered by sending the `delivered` signal.

    python -m examples.carrier ORDER_ID [--address HOST:PORT]
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime

from sdk import Client, WeftError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("order_id")
    parser.add_argument("--address", default=os.environ.get("WEFT_ADDRESS", "127.0.0.1:7400"))
    args = parser.parse_args(argv)
    delivery = {"carrier": "ACME Parcels", "delivered_at": datetime.now(UTC), "signed_by": "J. Doe"}
    try:
        with Client(args.address) as client:
            # The request id makes a re-sent notification a no-op, as carriers do re-send.
            client.signal(
                args.order_id, "delivered", delivery, request_id=f"delivered-{args.order_id}"
            )
    except WeftError as exc:
        print(f"carrier: {exc}", file=sys.stderr)
        return 1
    print(f"carrier: told {args.order_id} it was delivered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
