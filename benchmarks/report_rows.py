"""One row of a report table: what, ours, the peer's name, the peer's value, the unit."""

Row = tuple[str, float | None, str, float | None, str]
