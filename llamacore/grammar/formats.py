"""JSON Schema ``format`` values as regular expressions, compiled like ``pattern`` by json_regex.

Each expression generates only strings that the format's standard accepts (and that the
validators jsonschema uses accept: ``date.fromisoformat``, rfc3339-validator, isoduration, fqdn,
``ipaddress``, rfc3986-validator): dates respect month lengths and leap years, addresses have no
leading zeros. Repetitions are bounded, so every format has a known maximum length (``uri`` stays
under 2,083 characters, pydantic's ``HttpUrl`` limit). A format not listed here is refused by name
rather than ignored.
"""

from __future__ import annotations

from llamacore.grammar.limits import UnsupportedSchemaError

_DAY31 = "(?:0[1-9]|[12][0-9]|3[01])"
_DAY30 = "(?:0[1-9]|[12][0-9]|30)"
_DAY28 = "(?:0[1-9]|1[0-9]|2[0-8])"
_LEAP_YEAR = "(?:[1-9][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[13579][26])00)"
DATE = (f"(?:[1-9][0-9]{{3}}-(?:(?:0[13578]|1[02])-{_DAY31}|(?:0[469]|11)-{_DAY30}|02-{_DAY28})"
        f"|{_LEAP_YEAR}-02-29)")
TIME = ("(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?"
        "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
_N = "[0-9]{1,4}"
_DUR_TIME = f"T(?:{_N}H(?:{_N}M(?:{_N}S)?)?|{_N}M(?:{_N}S)?|{_N}S)"
_DUR_DATE = f"(?:{_N}Y(?:{_N}M(?:{_N}D)?)?|{_N}M(?:{_N}D)?|{_N}D)"
DURATION = f"P(?:{_N}W|{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME})"
_HEX = "[0-9a-fA-F]"
UUID = f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
_LABEL = "[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,18}[a-zA-Z0-9])?"
HOSTNAME = f"{_LABEL}(?:\\.{_LABEL}){{0,3}}"
_LOCAL = "[a-zA-Z0-9_+-]{1,20}"
EMAIL = f"{_LOCAL}(?:\\.{_LOCAL}){{0,2}}@{HOSTNAME}"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
IPV4 = f"{_OCTET}(?:\\.{_OCTET}){{3}}"
_H16 = f"{_HEX}{{1,4}}"


def _ipv6() -> str:
    """Eight groups, or fewer around one '::' (left groups + right groups <= 7)."""
    forms = [f"{_H16}(?::{_H16}){{7}}", f"::(?:{_H16}(?::{_H16}){{0,6}})?"]
    for left in range(1, 8):
        head = f"{_H16}(?::{_H16}){{{left - 1}}}" if left > 1 else _H16
        tail = f"(?:{_H16}(?::{_H16}){{0,{6 - left}}})?" if left < 7 else ""
        forms.append(f"{head}::{tail}")
    return "(?:" + "|".join(forms) + ")"


IPV6 = _ipv6()
_PCHAR = "[a-zA-Z0-9._~!$&'()*+,;=:@-]"
_QCHAR = "[a-zA-Z0-9._~!$&'()*+,;=:@/?-]"
URI = (f"[a-zA-Z][a-zA-Z0-9+.-]{{0,9}}://{HOSTNAME}(?::[0-9]{{1,5}})?(?:/{_PCHAR}{{0,40}}){{0,8}}"
       f"(?:\\?{_QCHAR}{{0,60}})?(?:#{_QCHAR}{{0,30}})?")

FORMATS: dict[str, str] = {
    "date": DATE, "time": TIME, "date-time": f"{DATE}T{TIME}", "duration": DURATION, "uuid": UUID,
    "email": EMAIL, "hostname": HOSTNAME, "ipv4": IPV4, "ipv6": IPV6, "uri": URI,
}


def format_pattern(name: object, path: str) -> str:
    """The anchored expression of format ``name``; ValueError naming it if it is not supported."""
    if not isinstance(name, str):
        raise ValueError(f"{path}: 'format' must be a string, got {name!r}")
    if name not in FORMATS:
        raise UnsupportedSchemaError(f"{path}: format {name!r} is not supported (supported: {', '.join(FORMATS)})")
    return FORMATS[name]
