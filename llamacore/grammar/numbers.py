"""GBNF for JSON numbers within bounds (``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``).

A bounded number is written as digits with an optional fraction of up to FRACTION_DIGITS digits
and no exponent; the grammar compares digit strings, so it is exact in decimal. Validators compare
binary floats, so each bound is first taken as the double it denotes (an exclusive bound as the
next double inward), written as the shortest decimal that reads back as that double: a decimal at
or beyond it parses, by monotonic rounding, to a double that still satisfies the bound.
"""

from __future__ import annotations

import math
from decimal import Decimal

from llamacore.grammar.gbnf import group, quote, uint_range

FRACTION_DIGITS = 16
_EXACT = 2**53   # integers beyond this are not all doubles


def _bound(value: object, key: str, path: str, exclusive: bool, upward: bool) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{path}: {key!r} must be a number (draft-4 boolean form is not supported)")
    if isinstance(value, int) and abs(value) > _EXACT or not math.isfinite(value):
        raise ValueError(f"{path}: {key!r} is beyond the range where numbers compare exactly (±2**53)")
    x = float(value)
    if exclusive:
        x = math.nextafter(x, math.inf if upward else -math.inf)
    # the shortest decimal that reads back as x: anything beyond it reads back beyond x
    return Decimal(repr(x))


def _fraction_digits(x: Decimal) -> str:
    """Digits after the point of a non-negative ``x`` (no trailing zeros)."""
    text = format(x - int(x), "f")
    return text.partition(".")[2].rstrip("0")


def _fractions(lo: str, hi: str | None, room: int) -> tuple[bool, list[str]]:
    """Digit strings ``s`` of at most ``room`` digits with 0.lo <= 0.s <= 0.hi (hi None: below 1).

    Returns (whether the empty string qualifies, alternatives for the non-empty ones).
    """
    empty_ok = not lo.strip("0")
    if room == 0:
        return empty_ok, []
    first = int(lo[0]) if lo else 0
    last = 9 if hi is None else int(hi[0]) if hi else 0      # hi "": only zeros remain
    alts = []
    for d in range(first, last + 1):
        sub_lo = lo[1:] if d == first else ""
        sub_hi = hi[1:] if hi is not None and d == last else None
        if not sub_lo.strip("0") and (sub_hi is None or not sub_hi.strip("0")):
            tail = "[0-9]" if sub_hi is None else "[0]"      # anything, or zeros only
            alts.append(f'"{d}" {tail}{{0,{room - 1}}}' if room > 1 else f'"{d}"')
            continue
        rest_empty, rest = _fractions(sub_lo, sub_hi, room - 1)
        if rest:
            alts.append(f'"{d}" ({" | ".join(rest)}){"?" if rest_empty else ""}')
        elif rest_empty:
            alts.append(f'"{d}"')
    return empty_ok, _merge_digits(alts)


def _merge_digits(alts: list[str]) -> list[str]:
    """'"3" [0-9]{0,k}' alternatives for consecutive digits as one class ('[3-7] [0-9]{0,k}')."""
    out: list[str] = []
    run: list[int] = []
    tail = ""

    def flush() -> None:
        if run:
            cls = f"[{run[0]}]" if len(run) == 1 else f"[{run[0]}-{run[-1]}]"
            out.append(f"{cls} {tail}".strip())
            run.clear()

    for alt in alts:
        digit, _, rest = alt[1:].partition('"')
        rest = rest.strip()
        if rest.startswith("[0-9]") or not rest:
            if run and (rest != tail or int(digit) != run[-1] + 1):
                flush()
            run.append(int(digit))
            tail = rest
        else:
            flush()
            out.append(alt)
    flush()
    return out


def _with_fraction(integer: str, lo: str, hi: str | None) -> str | None:
    empty_ok, alts = _fractions(lo, hi, FRACTION_DIGITS)
    if not alts:
        return integer if empty_ok else None
    fraction = f'"." {group(alts)}'
    return f"{integer} ({fraction})?" if empty_ok else f"{integer} {fraction}"


def _non_negative(lo: Decimal, hi: Decimal | None) -> list[str]:
    """Alternatives for decimals in [lo, hi] (lo >= 0; hi None: unbounded)."""
    a, fa = int(lo), _fraction_digits(lo)
    if hi is not None and hi < lo:
        return []
    any_fraction = f'("." [0-9]{{1,{FRACTION_DIGITS}}})?'
    if hi is None:
        alts = [_with_fraction(quote(str(a)), fa, None), f"{uint_range(a + 1, None)} {any_fraction}"]
    else:
        b, fb = int(hi), _fraction_digits(hi)
        if a == b:
            alts = [_with_fraction(quote(str(a)), fa, fb)]
        else:
            alts = [_with_fraction(quote(str(a)), fa, None)]
            if a + 1 <= b - 1:
                alts.append(f"{uint_range(a + 1, b - 1)} {any_fraction}")
            alts.append(_with_fraction(quote(str(b)), "", fb))
    return [x for x in alts if x]


def number_range(schema: dict, path: str) -> str | None:
    """Sequence element for numbers within the schema's bounds, or None if it sets none."""
    lows = [_bound(schema[k], k, path, k.startswith("exclusive"), True)
            for k in ("minimum", "exclusiveMinimum") if k in schema]
    highs = [_bound(schema[k], k, path, k.startswith("exclusive"), False)
             for k in ("maximum", "exclusiveMaximum") if k in schema]
    if not lows and not highs:
        return None
    lo, hi = max(lows, default=None), min(highs, default=None)
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"{path}: number bounds leave no valid value")
    alts = []
    if lo is None or lo < 0:           # negative part: -y with y in [max(-hi, 0), -lo]
        y_lo = max(-hi, Decimal(0)) if hi is not None else Decimal(0)
        negative = _non_negative(y_lo, None if lo is None else -lo)
        if negative:
            alts.append(f'"-" {group(negative)}')
    if hi is None or hi >= 0:
        alts += _non_negative(max(lo, Decimal(0)) if lo is not None else Decimal(0), hi)
    if not alts:
        raise ValueError(f"{path}: no number with at most {FRACTION_DIGITS} decimals lies within the bounds")
    return group(alts)
