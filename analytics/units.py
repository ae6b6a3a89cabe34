"""Numbers as an operator reads them: `1.03 GB`, `2.0 M records`, `3.2 k/s`, `4 m 10 s`.

The report shows these beside (never instead of) the exact values of the Parquet tables:
every formatted cell carries its exact value in a `title` and a `data-value` attribute.
Byte sizes are decimal (1 kB = 1000 B), as disk and network rates are quoted.
"""

from __future__ import annotations

import datetime as dt
import math

__all__ = [
    "fmt_axis",
    "fmt_bytes",
    "fmt_byte_rate",
    "fmt_change",
    "fmt_count",
    "fmt_duration",
    "fmt_exact",
    "fmt_rate",
    "fmt_time",
]

_COUNT_PREFIXES = ("", " k", " M", " G", " T", " P")
_BYTE_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")
MISSING = "–"


def _scaled(value: float, significant_three: bool) -> tuple[str, int]:
    """(mantissa text, power of 1000) for |value| >= 1000 or not; rounding that reaches
    1000 moves to the next prefix (999.96 k is `1.0 M`, not `1000.0 k`)."""
    power = 0
    magnitude = abs(value)
    while magnitude >= 1000 and power < len(_COUNT_PREFIXES) - 1:
        magnitude /= 1000
        power += 1
    while True:
        if significant_three:
            decimals = 2 if magnitude < 10 else 1 if magnitude < 100 else 0
        else:
            decimals = 1 if magnitude < 100 else 0
        text = f"{magnitude:.{decimals}f}"
        if float(text) >= 1000 and power < len(_COUNT_PREFIXES) - 1:
            magnitude /= 1000
            power += 1
            continue
        return ("-" if value < 0 else "") + text, power


def fmt_exact(value: int | float | None) -> str:
    """An exact count with thousands separators: `1,034,004,496`."""
    if value is None:
        return MISSING
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    return f"{int(value):,}"


def fmt_count(value: int | float | None, noun: str = "") -> str:
    """`950 records`, `12.5 k records`, `2.0 M records` (exact below 1000)."""
    if value is None:
        return MISSING
    suffix = f" {noun}" if noun else ""
    if abs(value) < 1000:
        return fmt_exact(value) + suffix
    text, power = _scaled(value, significant_three=False)
    return f"{text}{_COUNT_PREFIXES[power]}{suffix}"


def fmt_bytes(value: int | float | None) -> str:
    """`512 B`, `48.3 kB`, `1.03 GB`: three significant digits, decimal units."""
    if value is None:
        return MISSING
    if abs(value) < 999.5:
        return f"{value:.3g} B" if isinstance(value, float) else f"{value} B"
    text, power = _scaled(value, significant_three=True)
    return f"{text} {_BYTE_UNITS[power]}"


def fmt_rate(per_second: float | None, noun: str = "") -> str:
    """A rate per second: `0.17/s`, `12.5/s`, `3.2 k/s` (`noun` goes before `/s`)."""
    if per_second is None:
        return MISSING
    noun = f" {noun}" if noun else ""
    if per_second == 0:
        return f"0{noun}/s"
    if abs(per_second) < 1:
        return f"{per_second:.2g}{noun}/s"
    if abs(per_second) < 99.95:
        return f"{per_second:.1f}{noun}/s"
    if abs(per_second) < 999.5:
        return f"{per_second:.0f}{noun}/s"
    text, power = _scaled(per_second, significant_three=False)
    return f"{text}{_COUNT_PREFIXES[power]}{noun}/s"


def fmt_byte_rate(per_second: float | None) -> str:
    """`120 B/s`, `1.25 MB/s`."""
    if per_second is None:
        return MISSING
    if per_second == 0:
        return "0 B/s"
    return fmt_bytes(per_second) + "/s"


def fmt_duration(seconds: float | None) -> str:
    """`0 s`, `2.5 s`, `45 s`, `4 m 10 s`, `2 h 5 m`, `3 d 4 h` (two units at most)."""
    if seconds is None:
        return MISSING
    if seconds < 10 and not float(seconds).is_integer():
        return f"{seconds:.1f} s"
    total = round(seconds)
    if total < 60:
        return f"{total} s"
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        parts = [(days, "d"), (hours, "h")]
    elif hours:
        parts = [(hours, "h"), (minutes, "m")]
    else:
        parts = [(minutes, "m"), (secs, "s")]
    return " ".join(f"{n} {unit}" for n, unit in parts if n) or "0 s"


def fmt_change(now: int | float, before: int | float) -> str:
    """`+12.5 %`, `-3.0 %`, `no change`; from nothing, `up from 0`."""
    if now == before:
        return "no change"
    if before == 0:
        return "up from 0"
    change = (now - before) / before * 100
    return f"{change:+.1f} %"


def fmt_time(ms: int, *, seconds: bool = False, date: bool = True) -> str:
    """`2024-05-01 13:05` (UTC) from epoch milliseconds."""
    when = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    clock = "%H:%M:%S" if seconds else "%H:%M"
    return when.strftime(f"%Y-%m-%d {clock}" if date else clock)


def _decimals(step: float) -> int:
    """Decimals that tell ticks `step` apart: 0 for 250, 1 for 2.5 or 0.5, 2 for 0.25."""
    decimals = 0
    while decimals < 6 and abs(step * 10**decimals - round(step * 10**decimals)) > 1e-6:
        decimals += 1
    return decimals


def fmt_axis(values: list[float], kind: str) -> list[str]:
    """Labels of an axis's ticks with one prefix and one number of decimals for all, so
    they read as a scale: `0`, `2.5 k/s`, `5.0 k/s`, `7.5 k/s`. `kind` is `count`,
    `rate` (per second) or `byte_rate`."""
    top = max((abs(v) for v in values), default=0.0)
    power = min(int(math.log10(top) // 3), len(_COUNT_PREFIXES) - 1) if top >= 1000 else 0
    scale = 1000**power
    steps = [b - a for a, b in zip(values, values[1:], strict=False) if b > a]
    decimals = _decimals(min(steps) / scale) if steps else 0
    labels = []
    for v in values:
        number = f"{v / scale:.{decimals}f}"
        if v == 0:
            labels.append("0")
        elif kind == "byte_rate":
            labels.append(f"{number} {_BYTE_UNITS[power]}/s")
        elif kind == "rate":
            labels.append(f"{number}{_COUNT_PREFIXES[power]}/s")
        else:
            labels.append(f"{number}{_COUNT_PREFIXES[power]}")
    return labels
