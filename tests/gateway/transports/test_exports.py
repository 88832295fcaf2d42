from __future__ import annotations

import gateway.transports


def test_exported_members() -> None:
    # Every name in __all__ exists, and every class or function comes from this package.
    for name in gateway.transports.__all__:
        member = getattr(gateway.transports, name)
        if isinstance(member, type) or callable(member):
            assert member.__module__.startswith("gateway.transports"), name
    assert {"LocalTransport", "LocalNamespace", "FaultyTransport", "default_data_dir"} <= set(
        gateway.transports.__all__
    )
