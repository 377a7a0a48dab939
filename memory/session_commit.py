"""Group commit of session appends: the appends made in one event-loop iteration, to any number of
sessions, are written in one thread hop, then fsynced one file after another.

Writing every file first and syncing after lets the first fsync carry most of the others' work (a
journaling filesystem commits the other files' new blocks with it), and a turn's append waits for
one hop of the thread pool, not one each. An append still returns only once its own lines are on
disk, and a failure (disk full, a file that cannot be opened) is reported to that append alone.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from memory.session_file import write_lines


@dataclass
class _Append:
    path: Path
    data: bytes
    cut_at: int | None
    done: asyncio.Future[int]


def _commit(batch: list[tuple[Path, bytes, int | None]]) -> list[int | BaseException]:
    """Write each append, then fsync each file; per append its new size or its error."""
    results: list[int | BaseException] = []
    written: list[tuple[int, int]] = []  # (index in results, open descriptor)
    for path, data, cut_at in batch:
        try:
            written.append((len(results), write_lines(path, data, cut_at)))
            results.append(0)
        except Exception as exc:
            results.append(exc)
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

    def submit(self, path: Path, data: bytes, cut_at: int | None) -> asyncio.Future[int]:
        """Append `data` to `path` (cutting a torn tail at `cut_at`): a future of the file's new
        size, set once the lines are synced. The write happens even if nobody awaits it."""
        loop = asyncio.get_running_loop()
        request = _Append(path, data, cut_at, loop.create_future())
        self._pending.append(request)
        if len(self._pending) == 1:
            # Appends from tasks woken in this iteration join the batch before it leaves.
            loop.call_soon(self._flush, loop)
        return request.done

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._pending = self._pending, []
        self.batches += 1
        self.appends += len(batch)
        work = [(r.path, r.data, r.cut_at) for r in batch]
        future = loop.run_in_executor(None, _commit, work)

        def settle(outcome: asyncio.Future[list[int | BaseException]]) -> None:
            error = None if outcome.cancelled() else outcome.exception()
            results = [] if error is not None or outcome.cancelled() else outcome.result()
            for index, request in enumerate(batch):
                if request.done.done():
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
