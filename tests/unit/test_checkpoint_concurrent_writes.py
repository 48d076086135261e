"""Offset checkpoint files written from two threads at once (a periodic high-watermark checkpoint
still running on an executor thread when shutdown writes the file again): every write succeeds and
the file holds one of them whole. Both used one fixed ``.tmp`` name, so one rename found it gone
(ENOENT), which fails the log dir and made a broker exit 1 at a clean stop."""

from __future__ import annotations

import threading
from pathlib import Path

from storage.checkpoints import OffsetCheckpointFile


def test_concurrent_writes_of_one_checkpoint_file_all_succeed(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    errors: list[BaseException] = []
    written = [{("t", p): w * 1000 + p for p in range(50)} for w in range(2)]

    def writer(offsets: dict[tuple[str, int], int]) -> None:
        try:
            for _ in range(150):
                OffsetCheckpointFile(path).write(offsets)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in written]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert OffsetCheckpointFile(path).read() in written
