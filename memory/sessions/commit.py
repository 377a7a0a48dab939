"""Group commit of session appends: the appends made in one event-loop iteration, to any number of
sessions, are written and then fsynced one file after another in one thread hop.

Writing every file first and syncing after lets the first fsync carry most of the others' work (a
journaling filesystem commits the other files' new blocks with it), and a turn's append waits for
one hop of the thread pool, not one each. An append returns once its own lines are on disk, and a
failure (disk full, a file that cannot be opened) is reported to that append alone.

An append may ask to return as soon as its lines are written (`synced=False`): those are written
at once, on the event loop (one `write` of a few hundred bytes into the page cache, as a channel's
inbox writes its lines), so the caller goes on without a thread hop; the lines survive a killed
process, and reach the disk with the batch's fsync, or at the latest with the next synced append
to the same file (an fsync covers every earlier write of the file). The agent stores a user's
message that way, so the model call waits neither for the disk nor for a worker thread; the
answer's append, which comes before anything is sent, waits for both.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from memory.sessions.file import write_lines

log = logging.getLogger(__name__)


@dataclass
class _Append:
    path: Path
    data: bytes
    cut_at: int | None
    done: asyncio.Future[int]
    synced: bool  # settle `done` after the fsync, not as soon as the lines are written
    fd: int | None = None  # open on the file, once the lines are written (on the loop)


def _write(path: Path, data: bytes, cut_at: int | None) -> tuple[int, int]:
    """Write the lines, not yet synced: the open descriptor and the file's new size."""
    fd = write_lines(path, data, cut_at)
    try:
        return fd, os.fstat(fd).st_size
    except BaseException:
        os.close(fd)
        raise


def _commit(batch: list[tuple[Path, bytes, int | None, int | None]]) -> list[int | BaseException]:
    """Write each append not yet written (those with no descriptor), then fsync each file; per
    append its new size or its error. Errors are caught whole on purpose: each belongs to its own
    append's caller, and the batch's other appends must still be written and answered."""
    results: list[int | BaseException] = []
    written: list[tuple[int, int]] = []  # (index in results, open descriptor)
    for path, data, cut_at, fd in batch:
        if fd is None:
            try:
                fd = write_lines(path, data, cut_at)
            except Exception as exc:
                results.append(exc)
                continue
        written.append((len(results), fd))
        results.append(0)  # its size once synced, below
    for index, fd in written:
        try:
            os.fsync(fd)
            results[index] = os.fstat(fd).st_size
        except Exception as exc:
            results[index] = exc
        finally:
            os.close(fd)
    return results


class GroupCommit:
    """Batches session appends per event-loop iteration into one thread hop."""

    def __init__(self) -> None:
        self._pending: list[_Append] = []
        self.batches = 0  # thread hops taken
        self.appends = 0  # appends they carried

    def submit(
        self, path: Path, data: bytes, cut_at: int | None, *, synced: bool = True
    ) -> asyncio.Future[int]:
        """Append `data` to `path` (cutting a torn tail at `cut_at`): a future of the file's new
        size, set once the lines are synced (or, not `synced`, once they are written). The write
        happens even if nobody awaits it."""
        loop = asyncio.get_running_loop()
        request = _Append(path, data, cut_at, loop.create_future(), synced)
        if not synced:
            try:
                request.fd, size = _write(path, data, cut_at)
            except Exception as exc:
                request.done.set_exception(exc)
                return request.done
            request.done.set_result(size)  # its fsync leaves with the batch
        self._pending.append(request)
        if len(self._pending) == 1:
            # Appends from tasks woken in this iteration join the batch before it leaves.
            loop.call_soon(self._flush, loop)
        return request.done

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._pending = self._pending, []
        self.batches += 1
        self.appends += len(batch)
        work = [(r.path, r.data, r.cut_at, r.fd) for r in batch]
        try:
            future = loop.run_in_executor(None, _commit, work)
        except RuntimeError as exc:  # the loop's executor is shut down: the process is stopping
            for request in batch:
                if request.fd is not None:
                    os.close(request.fd)  # written; the kernel still writes it back
                if not request.done.done():
                    request.done.set_exception(exc)
            return

        def settle(outcome: asyncio.Future[list[int | BaseException]]) -> None:
            error = None if outcome.cancelled() else outcome.exception()
            results = [] if error is not None or outcome.cancelled() else outcome.result()
            for index, request in enumerate(batch):
                if request.done.done():
                    if not request.synced and _failed_after_writing(request, results, index):
                        # Its caller has moved on: the next synced append to the file syncs
                        # these lines too, or reports the disk's error itself.
                        log.warning("session append not synced path=%s error=%s",
                                    request.path, results[index])  # fmt: skip
                    continue
                if index < len(results):
                    result = results[index]
                    if isinstance(result, BaseException):
                        request.done.set_exception(result)
                    else:
                        request.done.set_result(result)
                else:
                    request.done.set_exception(error or RuntimeError("session append cancelled"))

        future.add_done_callback(settle)


def _failed_after_writing(request: _Append, results: list[int | BaseException], index: int) -> bool:
    """Whether an append settled at its write failed only at its fsync."""
    wrote = not request.done.cancelled() and request.done.exception() is None
    return wrote and index < len(results) and isinstance(results[index], BaseException)
