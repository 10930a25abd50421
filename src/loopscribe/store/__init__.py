"""Sessions in object storage: ship session files to any fsspec URL, read them back.

The local file stays the source of truth; a store holds copies that outlive
the machine::

    from loopscribe.store import Shipper
    Shipper("sessions/", "s3://team-bucket/agents").run(follow=True)

and anyone who can read the bucket::

    Workspace("s3://team-bucket/agents").list()
    read("s3://team-bucket/agents/sessions/<session_id>")

Needs ``pip install 'loopscribe[store]'`` (fsspec and s3fs; gcsfs or adlfs
for ``gs://`` and ``az://``). The object layout is described in
``loopscribe.store._layout`` and docs/store.md.
"""

from typing import TYPE_CHECKING

from .._lazy import listing, loader

if TYPE_CHECKING:
    from ..workspace import StoreWorkspace
    from ._layout import LAYOUT_VERSION, SEGMENT_BYTES, Segment
    from ._manifest import Manifest
    from ._read import ShippedSession, Store, open_session, parse_session_url
    from ._shipper import Shipper, ShipResult, cursor_path

__getattr__ = loader(
    __name__,
    {
        "..workspace": ("StoreWorkspace",),
        "._layout": ("LAYOUT_VERSION", "SEGMENT_BYTES", "Segment"),
        "._manifest": ("Manifest",),
        "._read": ("ShippedSession", "Store", "open_session", "parse_session_url"),
        "._shipper": ("Shipper", "ShipResult", "cursor_path"),
    },
    globals(),
)
"""Each name imported on first use (``loopscribe._lazy``): a command that only
parses a store URL does not load fsspec, the shipper or the workspace."""

__all__ = [
    "LAYOUT_VERSION",
    "SEGMENT_BYTES",
    "Manifest",
    "Segment",
    "ShipResult",
    "ShippedSession",
    "Shipper",
    "Store",
    "StoreWorkspace",
    "cursor_path",
    "open_session",
    "parse_session_url",
]

__dir__ = listing(globals())
