"""A griffe extension for the API reference: Sphinx roles in docstrings as code.

The docstrings name other objects the Sphinx way (``:class:`GeoSender```,
``:meth:`close```), which Markdown would show as is; this shows the name as code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj|const):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    """Rewrites ``:role:`name``` to ```name``` in every docstring it loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
