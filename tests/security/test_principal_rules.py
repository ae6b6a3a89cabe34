"""ssl.principal.mapping.rules, with the examples of Kafka's documentation."""

from __future__ import annotations

import pytest

from trio_broker.security.principal_rules import NoMatchingRule, PrincipalRules

DN = "CN=kafka-server1,OU=KAFKA"


def test_rules_in_order_then_default():
    rules = PrincipalRules.parse(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT"
    )
    assert rules.name("CN=svc,OU=ServiceUsers,O=Acme") == "svc"
    assert rules.name("CN=Adam,OU=Admins,O=Acme,L=X,ST=Y,C=Z") == "adam@admins"
    assert rules.name("O=Acme,CN=Duke.Two") == "duke.two"
    assert rules.name("O=NoCommonName") == "O=NoCommonName"


def test_upper_case_escaped_slash_and_no_match():
    rules = PrincipalRules.parse(r"RULE:^CN=([^,]*)\/x,.*$/$1/U")
    assert rules.name("CN=abc/x,O=o") == "ABC"
    with pytest.raises(NoMatchingRule):
        rules.name("O=other")
    assert PrincipalRules.parse("").name(DN) == DN  # empty: DEFAULT
    assert PrincipalRules.parse("DEFAULT").name(DN) == DN


@pytest.mark.parametrize("bad", ["RULE:^CN=(.*$/$1/", "RULE:abc", "NOPE", "DEFAULT x"])
def test_bad_rules_are_refused(bad):
    with pytest.raises(ValueError):
        PrincipalRules.parse(bad)
