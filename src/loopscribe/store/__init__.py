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

from ..workspace import StoreWorkspace
from ._layout import LAYOUT_VERSION, Segment
from ._manifest import Manifest
from ._read import ShippedSession, Store, open_session, parse_session_url
from ._shipper import SEGMENT_BYTES, Shipper, ShipResult, cursor_path

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
