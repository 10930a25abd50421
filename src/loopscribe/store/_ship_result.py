"""What one or more ``ship`` passes did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ShipResult"]


@dataclass(frozen=True, slots=True)
class ShipResult:
    """What one or more passes did.

    Attributes:
        sessions: Session files looked at.
        shipped: Sessions that got new records (or artifacts) in the store.
        segments: Segments put.
        records: Records shipped.
        bytes_uploaded: Bytes put to the store: segments, manifests, artifacts.
        adopted: Segments of an interrupted pass found complete and kept.
        errors: One line per problem (a file that could not be shipped, a
            refused artifact); everything else was shipped.
        repaired: Sessions whose chain of segments in the store was broken
            (by shippers of earlier versions taking turns) and was rebuilt
            from the local file.
    """

    sessions: int = 0
    shipped: int = 0
    segments: int = 0
    records: int = 0
    bytes_uploaded: int = 0
    adopted: int = 0
    errors: tuple[str, ...] = ()
    repaired: int = 0

    def __add__(self, other: ShipResult) -> ShipResult:
        return ShipResult(
            self.sessions + other.sessions,
            self.shipped + other.shipped,
            self.segments + other.segments,
            self.records + other.records,
            self.bytes_uploaded + other.bytes_uploaded,
            self.adopted + other.adopted,
            self.errors + other.errors,
            self.repaired + other.repaired,
        )

    def to_json(self) -> dict[str, Any]:
        """The result as JSON (``loopscribe ship --json``)."""
        return {
            "sessions": self.sessions,
            "shipped": self.shipped,
            "segments": self.segments,
            "records": self.records,
            "bytes_uploaded": self.bytes_uploaded,
            "adopted": self.adopted,
            "repaired": self.repaired,
            "errors": list(self.errors),
        }
