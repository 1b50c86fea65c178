"""One row of a report table: what, ours, the peer's name, the peer's value, the unit; and a
case's result in a report."""

Row = tuple[str, float | None, str, float | None, str]


def case_result(results: dict, case: str) -> dict | None:
    return results["cases"].get(case, {}).get("result")
