"""Which timeline layout a table uses (``hoodie.timeline.layout.version``) and where it lives.

Layout 1 (table version 6) keeps instant files directly under ``.hoodie/`` (module ``layout``);
layout 2 (table versions 8 and 9) under ``.hoodie/<hoodie.timeline.path>/`` with completion times
in the completed files' names (module ``layout_v2``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import LakeError
from airflow_lake_provider.lake.format.properties import parse_properties
from airflow_lake_provider.lake.format.timeline_paths import timeline_location
from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage
from airflow_lake_provider.lake.timeline import layout, layout_v2
from airflow_lake_provider.lake.timeline.instant import Instant


@dataclass(frozen=True)
class TimelineLayout:
    """A layout version and the table-relative folders of its active and archived timelines."""

    version: int
    folder: str = HOODIE_DIR
    # Layout 2's LSM archived timeline (layout 1 archives to ``.hoodie/archived/``).
    history_folder: str | None = None

    @property
    def has_completion_times(self) -> bool:
        return self.version >= layout_v2.VERSION

    def parse_file_name(self, name: str) -> Instant | None:
        if self.version >= layout_v2.VERSION:
            return layout_v2.parse_file_name(name)
        return layout.parse_file_name(name)

    def file_name(self, instant: Instant) -> str:
        if self.version >= layout_v2.VERSION:
            return layout_v2.file_name(instant)
        return layout.file_name(instant)

    def instant_path(self, instant: Instant) -> str:
        return f"{self.folder}/{self.file_name(instant)}"

    @classmethod
    def from_properties(cls, props: Mapping[str, str], source: str = "hoodie.properties") -> TimelineLayout:
        """The layout ``props`` declare (layout 1 when the key is absent, as in a folder with none)."""
        version, folder, history = timeline_location(props, source)
        if version == layout.VERSION:
            return LAYOUT_V1
        return cls(layout_v2.VERSION, f"{HOODIE_DIR}/{folder}", f"{HOODIE_DIR}/{folder}/{history}")

    @classmethod
    def detect(cls, storage: Storage) -> TimelineLayout:
        """The layout ``.hoodie/hoodie.properties`` declares (layout 1 without one)."""
        rel = f"{HOODIE_DIR}/hoodie.properties"
        try:
            text = storage.read(rel).decode("utf-8")
        except FileNotFoundError:
            return LAYOUT_V1
        except (LakeError, OSError, UnicodeDecodeError):
            return LAYOUT_V1  # opening the table reports what is wrong with the file
        return cls.from_properties(parse_properties(text, storage.uri(rel)), storage.uri(rel))


LAYOUT_V1 = TimelineLayout(layout.VERSION)
