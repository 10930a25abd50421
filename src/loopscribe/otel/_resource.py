"""What every span and metric of loopscribe's says about where it comes from.

The instrumentation scope (``loopscribe`` and the package's version) and the
default Resource, deterministic so a replay in another process matches the
live export. The bridge and the metrics both use them.
"""

from __future__ import annotations

import functools
import importlib.metadata

from opentelemetry.sdk.resources import (
    SERVICE_NAME,
    TELEMETRY_SDK_LANGUAGE,
    TELEMETRY_SDK_NAME,
    TELEMETRY_SDK_VERSION,
    OTELResourceDetector,
    Resource,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.sdk.version import __version__ as sdk_version

__all__ = ["default_resource", "hashed", "scope"]


@functools.cache
def scope() -> InstrumentationScope:
    """The bridge's instrumentation scope, read from the package metadata once."""
    try:
        version = importlib.metadata.version("loopscribe")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        version = "0+unknown"
    return InstrumentationScope("loopscribe", version)


class _HashedResource(Resource):
    """A Resource equal to the one it copies, hashed once instead of once per span.

    OTLP encoders group a batch's spans by Resource, which hashes it for
    every span, and ``Resource.__hash__`` serializes all its attributes to
    JSON each time. A Resource never changes, so its hash is kept.
    """

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


def hashed(resource: Resource) -> Resource:
    """``resource`` as a :class:`_HashedResource` (itself if it is one already)."""
    return resource if isinstance(resource, _HashedResource) else _HashedResource(resource)


def default_resource() -> Resource:
    """The Resource spans get unless one is given: deterministic, so replay matches live.

    ``service.name`` is ``loopscribe`` unless ``OTEL_SERVICE_NAME`` or
    ``OTEL_RESOURCE_ATTRIBUTES`` say otherwise. Unlike ``Resource.create()``
    it has no random ``service.instance.id``, which would make a replay in
    another process differ from the live export.
    """
    base = Resource(
        {
            SERVICE_NAME: "loopscribe",
            TELEMETRY_SDK_LANGUAGE: "python",
            TELEMETRY_SDK_NAME: "opentelemetry",
            TELEMETRY_SDK_VERSION: sdk_version,
        }
    )
    return base.merge(OTELResourceDetector().detect())
