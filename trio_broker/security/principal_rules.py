"""Kafka's ssl.principal.mapping.rules: from a client certificate's subject DN to a name.

    RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),O=(.*?)$/$1@$2/L,DEFAULT

Rules are tried in order; the first whose pattern matches the whole DN gives the name,
its replacement's `$n` standing for the pattern's groups, lower- or upper-cased with a
trailing `L` or `U`. `DEFAULT` gives the DN itself. No rule matching is an error (Kafka
refuses the connection).
"""

from __future__ import annotations

import re

import attrs

__all__ = ["NoMatchingRule", "PrincipalRules"]


class NoMatchingRule(ValueError):
    """No rule maps this DN."""


@attrs.frozen
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        match = self.pattern.fullmatch(dn)
        if match is None:
            return None
        out = re.sub(r"\$(\d+)", lambda m: match.group(int(m.group(1))) or "", self.replacement)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def _until_slash(text: str, i: int) -> tuple[str, int]:
    """The text from `i` to the next unescaped '/', unescaping '\\/'; and the index after it."""
    out = []
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i : i + 2] if text[i + 1] != "/" else "/")
            i += 2
            continue
        if c == "/":
            return "".join(out), i + 1
        out.append(c)
        i += 1
    raise ValueError("a RULE needs /pattern/replacement/")


@attrs.frozen
class PrincipalRules:
    rules: tuple[_Rule, ...]

    @classmethod
    def parse(cls, text: str) -> PrincipalRules:
        rules: list[_Rule] = []
        i, text = 0, text.strip()
        while i < len(text):
            while i < len(text) and text[i] in " \t\n,":
                i += 1
            if i >= len(text):
                break
            if text.startswith("DEFAULT", i):
                rules.append(_Rule(None))
                i += len("DEFAULT")
            elif text.startswith("RULE:", i):
                pattern, i = _until_slash(text, i + len("RULE:"))
                replacement, i = _until_slash(text, i)
                case = ""
                if i < len(text) and text[i] in "LU":
                    case, i = text[i], i + 1
                try:
                    rules.append(_Rule(re.compile(pattern), replacement, case))
                except re.error as exc:
                    raise ValueError(f"bad pattern {pattern!r}: {exc}") from None
            else:
                raise ValueError(f"expected RULE:... or DEFAULT at {text[i : i + 20]!r}")
            while i < len(text) and text[i] in " \t\n":
                i += 1
            if i < len(text) and text[i] != ",":
                raise ValueError(f"expected ',' at {text[i : i + 20]!r}")
        return cls(tuple(rules) or (_Rule(None),))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule matches {dn!r}")
