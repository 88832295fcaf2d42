"""redact(): secret values of connection strings and SAS tokens become ***."""

from __future__ import annotations

import logging
import sys

import pytest

from gateway._support.logs import RedactingFormatter
from gateway._support.secrets import redact

SECRET = "SECRETVALUE123"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;"
            f"SharedAccessKey={SECRET}=",
            "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=***",
        ),
        (
            f"Endpoint=sb://x/;SharedAccessSignature={SECRET};EntityPath=orders",
            "Endpoint=sb://x/;SharedAccessSignature=***;EntityPath=orders",
        ),
        (
            f"SharedAccessSignature sr=sb%3A%2F%2Fx&sig={SECRET}%3D&se=1700000000&skn=k",
            "SharedAccessSignature sr=sb%3A%2F%2Fx&sig=***&se=1700000000&skn=k",
        ),
        (
            f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={SECRET}==;",
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=***;",
        ),
        (f"user=me password={SECRET} host=h", "user=me password=*** host=h"),
        (f"token={SECRET}", "token=***"),
        (f"sharedaccesskey={SECRET}", "sharedaccesskey=***"),
        (f"'SharedAccessKey={SECRET}'", "'SharedAccessKey=***'"),
    ],
    ids=[
        "sas-key",
        "sas-signature",
        "sas-token-sig",
        "account-key",
        "password",
        "token",
        "case",
        "quoted",
    ],
)
def test_redact_replaces_secret_values(text, expected):
    # Given text holding a secret / When it is redacted / Then only the value is hidden
    redacted = redact(text)
    assert redacted == expected
    assert SECRET not in redacted


def test_redact_hides_every_secret_in_the_text():
    text = f"SharedAccessKey={SECRET}A; then AccountKey={SECRET}B and sig={SECRET}C"
    redacted = redact(text)
    assert SECRET not in redacted
    assert redacted.count("***") == 3


@pytest.mark.parametrize(
    "text",
    [
        "",
        "local://east",
        "sb://x.servicebus.windows.net/",
        "SharedAccessKeyName=RootManageSharedAccessKey",
        "design=blue;signature_count=3",
        "send failed: namespace 'east' is down",
    ],
)
def test_redact_leaves_text_without_secrets_alone(text):
    assert redact(text) == text


def test_redact_is_idempotent():
    once = redact(f"SharedAccessKey={SECRET}=")
    assert redact(once) == once


def test_credentials_inside_a_url_are_redacted():
    # Given URLs that carry a user and password or a token before the host
    text = "Endpoint=ftp://SECRET@x/; amqps://user:hunter2@host/q?access_token=TOKEN9"
    # When redacted / Then none of the secrets is left, the hosts are
    cleaned = redact(text)
    for secret in ("SECRET", "hunter2", "TOKEN9"):
        assert secret not in cleaned
    assert "@x/" in cleaned and "@host/q" in cleaned


def test_log_records_and_their_tracebacks_are_redacted() -> None:
    # Given a record whose message and exception carry a SAS token and a key
    try:
        raise RuntimeError("put-token SharedAccessSignature sr=x&sig=TOKENSIG&se=1 failed")
    except RuntimeError:
        record = logging.LogRecord("azure.x", logging.DEBUG, __file__, 1,
                                   "conn %s", ("SharedAccessKey=KEYVALUE",), sys.exc_info())
    # When it is formatted for the terminal
    text = RedactingFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    # Then neither secret is there, and the rest of the line is
    assert "TOKENSIG" not in text and "KEYVALUE" not in text
    assert text.startswith("DEBUG azure.x: conn SharedAccessKey=***") and "RuntimeError" in text
