"""The administration API's XML: durations as .NET writes them, and descriptions read
whatever prefixes the client wrote."""

from __future__ import annotations

import pytest

from gateway.emulator.admin._atom import NEVER, iso_duration
from gateway.emulator.admin._descriptions import BadRequest, parse_rule, parse_settings
from gateway.transports import CorrelationFilter, EntityKind, SqlFilter

SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
XSI = "http://www.w3.org/2001/XMLSchema-instance"


@pytest.mark.parametrize(("seconds", "text"), [
    (60.0, "PT1M"), (30.0, "PT30S"), (0.5, "PT0.5S"), (0.0, "PT0S"), (90061.0, "P1DT1H1M1S"),
    (86400.0, "P1D"), (None, NEVER), (1e15, NEVER),
])
def test_durations_are_written_as_iso_8601(seconds, text):
    assert iso_duration(seconds) == text


def entry(description: str) -> bytes:
    return (f'<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
            f"{description}</content></entry>").encode()


def test_a_queue_description_is_read_with_any_prefix():
    body = entry(f'<ns1:QueueDescription xmlns:ns1="{SB}"><ns1:LockDuration>PT45S'
                 "</ns1:LockDuration><ns1:MaxDeliveryCount>4</ns1:MaxDeliveryCount>"
                 f"<ns1:DefaultMessageTimeToLive>{NEVER}</ns1:DefaultMessageTimeToLive>"
                 "<ns1:RequiresDuplicateDetection>true</ns1:RequiresDuplicateDetection>"
                 "<ns1:UserMetadata>note</ns1:UserMetadata></ns1:QueueDescription>")
    s = parse_settings(body, EntityKind.QUEUE)
    assert (s.lock_duration, s.max_delivery_count, s.default_ttl) == (45.0, 4, None)
    assert s.duplicate_window == 600.0  # the service's default window
    assert dict(s.extras) == {"UserMetadata": "note"}


def test_rules_are_read_and_what_is_not_emulated_is_refused():
    correlation = entry(
        f'<RuleDescription xmlns="{SB}" xmlns:i="{XSI}"><Filter i:type="CorrelationFilter">'
        "<CorrelationId>c</CorrelationId><Properties><KeyValueOfstringanyType><Key>n</Key>"
        '<Value xmlns:d6p1="http://www.w3.org/2001/XMLSchema" i:type="d6p1:int">3</Value>'
        "</KeyValueOfstringanyType></Properties></Filter></RuleDescription>")
    assert parse_rule(correlation, "r").filter == CorrelationFilter(correlation_id="c",
                                                                    properties={"n": 3})
    sql = entry(f'<RuleDescription xmlns="{SB}" xmlns:i="{XSI}"><Filter i:type="SqlFilter">'
                "<SqlExpression>a = 1</SqlExpression></Filter></RuleDescription>")
    assert parse_rule(sql, "r").filter == SqlFilter("a = 1")
    with_parameters = sql.replace(b"</SqlExpression>", b"</SqlExpression><Parameters>"
                                  b"<KeyValueOfstringanyType/></Parameters>")
    with pytest.raises(BadRequest, match="parameters"):
        parse_rule(with_parameters, "r")
    with pytest.raises(BadRequest, match="not XML"):
        parse_rule(b"<entry", "r")


def test_forwarding_dead_letters_is_refused_not_ignored():
    body = entry(f'<QueueDescription xmlns="{SB}"><ForwardDeadLetteredMessagesTo>'
                 "https://h/elsewhere</ForwardDeadLetteredMessagesTo></QueueDescription>")
    with pytest.raises(BadRequest, match="ForwardDeadLetteredMessagesTo"):
        parse_settings(body, EntityKind.QUEUE)
