"""The .ttr recording: a framed, checksummed, append-only file of a run (docs/recording-format.md).

``record_run`` / ``Recorder`` write one; ``RecordingReader`` opens one as untrusted input.
"""

from timetravel.recording.catalog import MAIN_BRANCH, Catalog, EventBatchInfo, ManifestInfo
from timetravel.recording.format import FORMAT_VERSION, RecordingError
from timetravel.recording.reader import RecordingReader
from timetravel.recording.record_run import default_recording_path, record_run
from timetravel.recording.recorder import SNAPSHOT_EVERY_EVENTS_DEFAULT, Recorder
from timetravel.recording.writer import RecordingWriter

__all__ = [
    "FORMAT_VERSION",
    "MAIN_BRANCH",
    "SNAPSHOT_EVERY_EVENTS_DEFAULT",
    "Catalog",
    "EventBatchInfo",
    "ManifestInfo",
    "Recorder",
    "RecordingError",
    "RecordingReader",
    "RecordingWriter",
    "default_recording_path",
    "record_run",
]
