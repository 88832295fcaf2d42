"""What the Service Bus and Event Hubs transports share: configuration, credentials,
conversions and error mapping at the Azure SDKs' boundary.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.transports.sdk._config import (
        SdkOptions,
        check_namespace_host,
        connection_string_parts,
        default_credential,
        host_of,
    )
    from gateway.transports.sdk._convert import (
        amqp_properties,
        body_bytes,
        epoch_seconds,
        parse_offset,
        properties_from,
        starting_position,
        text_or_none,
    )
    from gateway.transports.sdk._credentials import Credential, check_credential
    from gateway.transports.sdk._errors import (
        Outcome,
        build_error,
        builtin_outcome,
        condition_outcome,
        find_status_code,
        status_outcome,
        walk,
    )
    from gateway.transports.sdk._transport import CLOSE_TIMEOUT, GRACE, SdkTransport, check_entity

_LAZY = {
    "amqp_properties": "gateway.transports.sdk._convert",
    "body_bytes": "gateway.transports.sdk._convert",
    "build_error": "gateway.transports.sdk._errors",
    "builtin_outcome": "gateway.transports.sdk._errors",
    "check_credential": "gateway.transports.sdk._credentials",
    "check_entity": "gateway.transports.sdk._transport",
    "check_namespace_host": "gateway.transports.sdk._config",
    "CLOSE_TIMEOUT": "gateway.transports.sdk._transport",
    "condition_outcome": "gateway.transports.sdk._errors",
    "connection_string_parts": "gateway.transports.sdk._config",
    "Credential": "gateway.transports.sdk._credentials",
    "default_credential": "gateway.transports.sdk._config",
    "epoch_seconds": "gateway.transports.sdk._convert",
    "find_status_code": "gateway.transports.sdk._errors",
    "GRACE": "gateway.transports.sdk._transport",
    "host_of": "gateway.transports.sdk._config",
    "Outcome": "gateway.transports.sdk._errors",
    "parse_offset": "gateway.transports.sdk._convert",
    "properties_from": "gateway.transports.sdk._convert",
    "SdkOptions": "gateway.transports.sdk._config",
    "SdkTransport": "gateway.transports.sdk._transport",
    "starting_position": "gateway.transports.sdk._convert",
    "status_outcome": "gateway.transports.sdk._errors",
    "text_or_none": "gateway.transports.sdk._convert",
    "walk": "gateway.transports.sdk._errors",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "CLOSE_TIMEOUT",
    "GRACE",
    "Credential",
    "Outcome",
    "SdkOptions",
    "SdkTransport",
    "amqp_properties",
    "body_bytes",
    "build_error",
    "builtin_outcome",
    "check_credential",
    "check_entity",
    "check_namespace_host",
    "condition_outcome",
    "connection_string_parts",
    "default_credential",
    "epoch_seconds",
    "find_status_code",
    "host_of",
    "parse_offset",
    "properties_from",
    "starting_position",
    "status_outcome",
    "text_or_none",
    "walk",
]
