"""All partition logs of a broker across its ``log.dirs``: startup/recovery, checkpoints, shutdown.

Startup per log dir (like Kafka's LogManager.loadLogs): note whether ``.kafka_cleanshutdown``
exists, read ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``, open
every ``<topic>-<partition>`` dir (leftover ``*-delete`` dirs are removed), then delete the
marker so a crash from here on is seen as unclean. Shutdown flushes and closes every log,
writes both checkpoints, and writes the marker last.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from storage import dir_failure
from storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    FilesystemSync,
    OffsetCheckpointFile,
    delete_clean_shutdown,
    has_clean_shutdown,
    write_clean_shutdown,
)
from storage.log import DELETE_DIR_SUFFIX, Log, ProducerStateHook, parse_topic_partition
from storage.log_config import LogConfig

log = logging.getLogger("storage.log")

# Kafka suffixes for dirs that are not live partitions (future replicas, strays, deletions).
_SKIP_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, "-future", "-stray")


# Threads that flush and close logs at shutdown (without syncfs).
_SHUTDOWN_WORKERS = 8
# From this many logs a shutdown syncs each log dir's filesystem once instead of every file: below
# it, the few fsyncs cost less than writing back whatever else is dirty on that filesystem.
_SYNCFS_MIN_LOGS = 64


def _flush_and_close(lg: Log) -> None:
    lg.flush()
    lg.close()


class _LoadProgress:
    """INFO lines "loaded 40/104 partitions" while a log dir takes long to load (every few seconds)."""

    INTERVAL_S = 5.0

    def __init__(self, log_dir: Path, total: int) -> None:
        self.log_dir, self.total, self.done = log_dir, total, 0
        self.next_report = time.monotonic() + self.INTERVAL_S

    def step(self) -> None:
        self.done += 1
        now = time.monotonic()
        if now >= self.next_report and self.done < self.total:
            log.info("Loading logs from %s: loaded %d/%d partitions", self.log_dir, self.done, self.total)
            self.next_report = now + self.INTERVAL_S


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        *,
        producer_state_factory: Callable[[Path], ProducerStateHook] | None = None,
        config_for_topic: Callable[[str], LogConfig | None] | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self.producer_state_factory = producer_state_factory
        self.config_for_topic = config_for_topic
        self._logs: dict[tuple[str, int], Log] = {}
        self._dir_of: dict[tuple[str, int], Path] = {}  # partition -> its log dir
        # partitions per log dir (kept with _dir_of by _set_dir / _drop_dir), for placing new ones
        self._dir_counts: dict[Path, int] = {}
        self.had_clean_shutdown: dict[Path, bool] = {}
        self._deleting: set[Log] = set()  # detached, files not deleted yet

    # --- lifecycle ------------------------------------------------------------------------------

    def startup(self) -> None:
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            clean = has_clean_shutdown(log_dir)
            self.had_clean_shutdown[log_dir] = clean
            recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
            start_offsets = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
            entries = sorted((e for e in os.scandir(log_dir) if e.is_dir()), key=lambda e: e.name)
            # An empty dir has no clean-shutdown marker either: that is a first start, not a crash.
            first_start = not clean and not entries and not (log_dir / RECOVERY_POINT_CHECKPOINT).exists()
            log.info("Loading logs from %s (%s)", log_dir,
                     "first start" if first_start else "clean shutdown" if clean else "unclean shutdown")
            progress = _LoadProgress(log_dir, len(entries))
            dir_started = time.monotonic()
            loaded = recovered_parts = recovered_segs = replayed = 0
            for entry in entries:
                if entry.name.endswith(DELETE_DIR_SUFFIX):
                    log.info("Removing partially deleted partition dir %s", entry.path)
                    shutil.rmtree(entry.path, ignore_errors=True)
                    continue
                if entry.name.endswith(_SKIP_DIR_SUFFIXES):
                    continue
                try:
                    tp = parse_topic_partition(entry.name)
                except ValueError:
                    continue
                if tp in self._logs:
                    log.error("Duplicate log directory for %s-%d in %s; ignoring it", tp[0], tp[1], entry.path)
                    continue
                started = time.monotonic()
                rp = recovery_points.get(tp, 0)
                lg = self._open(Path(entry.path), tp[0], recovery_point=rp,
                                log_start_offset=start_offsets.get(tp, 0), clean_shutdown=clean)
                self._logs[tp] = lg
                self._set_dir(tp, log_dir)
                # One line per partition is noise at INFO (100+ for the internal topics alone).
                log.debug(
                    "Loaded %s-%d: start %d, end %d, %d segments, recovery point %d%s in %.1f ms",
                    tp[0], tp[1], lg.log_start_offset, lg.log_end_offset, len(lg.segments), lg.recovery_point,
                    "" if clean else f" (recovered from {rp})", (time.monotonic() - started) * 1000,
                )
                progress.step()
                loaded += 1
                recovered_parts += lg.recovered_segments > 0
                recovered_segs += lg.recovered_segments
                replayed += lg.replayed_batches
            # The one INFO line per log dir (Kafka's LogManager: "Loaded N logs in X ms").
            log.info("Loaded %d partitions from %s in %.1f ms%s", loaded, log_dir,
                     (time.monotonic() - dir_started) * 1000,
                     f"; recovered {recovered_segs} segments of {recovered_parts} partitions, replayed "
                     f"{replayed} batches into producer state" if recovered_segs or replayed else "")
            delete_clean_shutdown(log_dir)

    def shutdown(self, broker_epoch: int = -1) -> None:
        logs = list(self._logs.values())
        syncs = self._filesystem_syncs() if len(logs) >= _SYNCFS_MIN_LOGS else None
        if syncs is not None:
            if not self._close_with_syncfs(logs, syncs):
                return  # no clean-shutdown marker: the next start recovers from the last checkpoints
        elif len(logs) > 1:
            # Each log's flush and close are a few fsyncs of its own files; thousands of partitions
            # would take seconds one after the other, so they run side by side (fsync releases the
            # GIL). The checkpoints and the clean-shutdown marker still come after all of them.
            with ThreadPoolExecutor(max_workers=min(_SHUTDOWN_WORKERS, len(logs)),
                                    thread_name_prefix="log-shutdown") as pool:
                list(pool.map(_flush_and_close, logs))
        else:
            for lg in logs:
                _flush_and_close(lg)
        self.delete_detached(list(self._deleting))
        self.checkpoint()
        for log_dir in self.log_dirs:
            write_clean_shutdown(log_dir, broker_epoch)

    def _filesystem_syncs(self) -> list[FilesystemSync] | None:
        """One FilesystemSync per log dir, opened before the shutdown's writes (see
        FilesystemSync); None where syncfs does not report errors or a dir cannot be opened."""
        if not FilesystemSync.available():
            return None
        syncs: list[FilesystemSync] = []
        try:
            for d in self.log_dirs:
                syncs.append(FilesystemSync(d))
        except OSError as e:
            log.warning("Shutdown: cannot open %s for syncfs (%s); fsyncing each log instead", d, e)
            for fs in syncs:
                fs.close()
            return None
        return syncs

    def _close_with_syncfs(self, logs: list[Log], syncs: list[FilesystemSync]) -> bool:
        """Flush and close every log without its per-file fsyncs (four or five per partition: a
        new partition's segment, three index files and its directory), then make all of it durable
        with one syncfs per log dir. Kafka fsyncs each log; at 10,000 partitions that is ~50,000
        fsyncs and most of a clean stop, where one syncfs writes the same pages and metadata in one
        journal commit. The result is at least as durable (the whole filesystem, the indexes
        written by close included). False when a syncfs failed: the recovery points just advanced
        in memory are then not written, nor the clean-shutdown marker."""
        try:
            for lg in logs:
                lg.flush(sync=False)
                lg.close(sync=False)
            for fs in syncs:
                try:
                    fs.sync()
                except OSError as e:
                    log.error("Shutdown: %s; not marking %s as cleanly shut down", e, fs.path)
                    return False
            return True
        finally:
            for fs in syncs:
                fs.close()

    # --- lookup / creation ------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig) -> Log:
        lg = self._logs.get((topic, partition))
        if lg is not None:
            # A log loaded at startup got the default config (no config_for_topic) before the
            # topic's own configs were known: the caller's config is the current one.
            if lg.config != config:
                lg.update_config(config)
            return lg
        path = self.dir_for(topic, partition)
        # A partition created now has nothing to recover.
        fresh = not path.exists()
        try:
            lg = Log.open(path, config, producer_state=self._producer_state(path), clean_shutdown=fresh)
        except OSError as e:
            dir_failure.failed(path.parent, e)
            raise
        self._logs[(topic, partition)] = lg
        self._set_dir((topic, partition), path.parent)
        log.debug("Created log for %s-%d in %s", topic, partition, path.parent)
        return lg

    # --- creation in steps (a broker creating many partitions keeps its event loop free) ------

    def reserve_dirs(self, topic: str, partitions: Iterable[int]) -> list[tuple[int, Path]]:
        """Pick the dir of each new partition now, so that the placement of later ones counts them
        (the owner thread, before ``open_new_logs`` runs elsewhere). ``release_dirs`` undoes it."""
        out = []
        for p in partitions:
            path = self.dir_for(topic, p)
            self._set_dir((topic, p), path.parent)
            out.append((p, path))
        return out

    def release_dirs(self, topic: str, partitions: Iterable[int]) -> None:
        for p in partitions:
            if (topic, p) not in self._logs:
                self._drop_dir((topic, p))

    def open_new_logs(self, planned: list[tuple[int, Path]], config: LogConfig,
                      leader_epochs: Mapping[int, int]) -> list[tuple[int, Log]]:
        """Create (or open, if a dir is already there) the logs of ``planned`` partitions. Touches
        only the filesystem and the new Log objects, so it may run in an executor thread; the
        logs are not served until ``register_log``. On error the logs opened so far are closed."""
        opened: list[tuple[int, Log]] = []
        try:
            for p, path in planned:
                fresh = not path.exists()  # a partition created now has nothing to recover
                lg = Log.open(path, config, producer_state=self._producer_state(path), clean_shutdown=fresh)
                opened.append((p, lg))
                lg.assign_leader_epoch(leader_epochs[p], lg.log_end_offset)
        except BaseException as e:
            for _, lg in opened:
                lg.close()
            if isinstance(e, OSError):
                dir_failure.failed(path.parent, e)
            raise
        return opened

    def register_log(self, topic: str, partition: int, lg: Log) -> Log:
        """Make a log from ``open_new_logs`` known (the owner thread). If one was registered
        meanwhile, that one stays and ``lg`` is closed."""
        existing = self._logs.get((topic, partition))
        if existing is not None:
            lg.close()
            return existing
        self._logs[(topic, partition)] = lg
        self._set_dir((topic, partition), lg.dir.parent)
        log.debug("Created log for %s-%d in %s", topic, partition, lg.dir.parent)
        return lg

    def detach_log(self, topic: str, partition: int) -> Log | None:
        """Forget a partition being deleted, before its files go (``delete_detached``, which may
        run in an executor). Until then shutdown finishes the deletion, so a clean stop never
        leaves the dir of a deleted partition behind to be taken for a live one."""
        lg = self._logs.pop((topic, partition), None)
        self._drop_dir((topic, partition))
        if lg is not None:
            self._deleting.add(lg)
        return lg

    def delete_detached(self, logs: Iterable[Log]) -> None:
        for lg in logs:
            lg.delete()
            self._deleting.discard(lg)
            log.debug("Deleted log %s", lg.dir.name)

    def delete_log(self, topic: str, partition: int) -> None:
        lg = self._logs.pop((topic, partition), None)
        self._drop_dir((topic, partition))
        if lg is not None:
            lg.delete()
            log.info("Deleted log for %s-%d", topic, partition)

    def all_logs(self) -> Iterable[Log]:
        return list(self._logs.values())

    def logs_for_topic(self, topic: str) -> list[Log]:
        return [lg for (t, _), lg in self._logs.items() if t == topic]

    def dir_for(self, topic: str, partition: int) -> Path:
        """The partition's dir: where it already lives, else in the log dir holding fewest partitions."""
        name = f"{topic}-{partition}"
        known = self._dir_of.get((topic, partition))
        if known is not None:
            return known / name
        if len(self.log_dirs) == 1:
            return self.log_dirs[0] / name
        counts = self._dir_counts
        best = min(self.log_dirs, key=lambda d: counts.get(d, 0))
        return best / name

    def _set_dir(self, tp: tuple[str, int], log_dir: Path) -> None:
        old = self._dir_of.get(tp)
        if old == log_dir:
            return
        if old is not None:
            self._dir_counts[old] -= 1
        self._dir_of[tp] = log_dir
        self._dir_counts[log_dir] = self._dir_counts.get(log_dir, 0) + 1

    def _drop_dir(self, tp: tuple[str, int]) -> None:
        old = self._dir_of.pop(tp, None)
        if old is not None:
            self._dir_counts[old] -= 1

    def dir_of(self, topic: str, partition: int) -> Path | None:
        """The log dir holding the partition's log (None if it has none)."""
        return self._dir_of.get((topic, partition))

    # --- periodic work (the broker schedules these) ------------------------------------------

    def checkpoint(self) -> None:
        """Write recovery-point and log-start-offset checkpoints of every log dir."""
        for log_dir in self.log_dirs:
            recovery: dict[tuple[str, int], int] = {}
            starts: dict[tuple[str, int], int] = {}
            for tp, lg in list(self._logs.items()):  # may run in an executor while the loop adds logs
                if self._dir_of.get(tp) != log_dir:
                    continue
                recovery[tp] = lg.recovery_point
                # Kafka only records start offsets that moved past the first segment's base.
                if lg.segments and lg.log_start_offset > lg.segments[0].base_offset:
                    starts[tp] = lg.log_start_offset
            try:
                OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write(recovery)
                OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write(starts)
            except OSError as e:
                dir_failure.failed(log_dir, e)
                raise

    def flush_dirty(self, now_ms: int) -> int:
        """Flush logs due by flush.ms and segments rolled since the last flush, synchronously in the
        calling thread (Log.flush mutates log state): only where no event loop is using the logs.
        A broker flushes each log through plan_flush / FlushPlan.sync / complete_flush instead.
        Returns how many logs were flushed."""
        n = 0
        for lg in list(self._logs.values()):
            if lg.closed:
                continue
            before = lg.recovery_point
            if lg.needs_flush(now_ms):
                lg.flush()
            else:
                lg.flush_rolled()
            n += lg.recovery_point != before
        return n

    def apply_retention(self, now_ms: int) -> int:
        """retention.ms / retention.bytes / log start offset over every log; returns segments deleted."""
        return sum(lg.apply_retention(now_ms) for lg in list(self._logs.values()) if not lg.closed)

    # --- helpers -------------------------------------------------------------------------------

    def _open(self, path: Path, topic: str, **kwargs: object) -> Log:
        config = None
        if self.config_for_topic is not None:
            config = self.config_for_topic(topic)
        return Log.open(path, config or self.default_config, producer_state=self._producer_state(path),
                        **kwargs)  # type: ignore[arg-type]

    def _producer_state(self, path: Path) -> ProducerStateHook | None:
        if self.producer_state_factory is None:
            return None
        path.mkdir(parents=True, exist_ok=True)
        return self.producer_state_factory(path)

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
        try:
            return OffsetCheckpointFile(path).read()
        except CheckpointError as e:
            log.warning("Ignoring malformed checkpoint file %s: %s", path, e)
            return {}
