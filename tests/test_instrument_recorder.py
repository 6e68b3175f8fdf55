"""`progress.ndjson` writer and memory probe: cadence, one write per line, durability, CUDA fields."""

import os
import time
from pathlib import Path

import pytest
import torch

from genrun.runner import memory as memory_module
from genrun.runner.memory import MemoryProbe
from genrun.runner.recorder import ProgressRecorder
from genrun.schemas import EVENT_ADAPTER
from genrun.snapshot_dir import SnapshotDir


def lines(path: Path) -> list[dict]:
    return [EVENT_ADAPTER.validate_json(line).model_dump() for line in path.read_bytes().splitlines()]


def recorder(path: Path, **overrides) -> ProgressRecorder:
    options = dict(origin=time.monotonic(), unit="token", every_units=4, every_seconds=3600.0)
    options.update(overrides)
    return ProgressRecorder(SnapshotDir(path.parent, writable=True).open_stream(path.name), **options)


def test_unit_cadence_and_contiguous_sequence(tmp_path: Path) -> None:
    path = tmp_path / "progress.ndjson"
    rec = recorder(path)
    rec.start(planned_units=10, rows=1)
    rec.set_last_ids(lambda: (7, 8))
    for _ in range(10):
        rec.step()
    rec.end()
    events = lines(path)
    assert [(e["event"], e["generated"]) for e in events] == [
        ("start", 0), ("first_token", 1), ("progress", 4), ("progress", 8), ("end", 10)
    ]
    assert [e["seq"] for e in events] == list(range(5))
    assert all(a["t"] <= b["t"] for a, b in zip(events, events[1:]))
    assert events[2]["last_ids"] == (7, 8) and events[-1]["last_ids"] == (7, 8)
    assert all(e["rss_bytes"] and e["rss_bytes"] > 0 for e in events)
    assert rec.closed


def test_time_cadence_writes_records_between_unit_multiples(tmp_path: Path) -> None:
    path = tmp_path / "progress.ndjson"
    rec = recorder(path, every_units=10**6, every_seconds=0.01)
    rec.start(None, 1)
    for _ in range(5):
        rec.step()
        time.sleep(0.02)
    rec.interrupted("SIGTERM")
    events = lines(path)
    assert [e["event"] for e in events] == ["start", "first_token", "progress", "progress", "progress", "progress", "interrupted"]
    assert events[-1]["signal"] == "SIGTERM" and events[-1]["generated"] == 5
    assert events[3]["window_units_per_s"] > 0


def test_frames_count_tokens_per_frame(tmp_path: Path) -> None:
    path = tmp_path / "progress.ndjson"
    rec = recorder(path, unit="frame", tokens_per_unit=4, every_units=2)
    rec.start(None, 1)
    for _ in range(17):
        rec.step()
    rec.end()
    assert [(e["event"], e["generated"]) for e in lines(path)] == [
        ("start", 0), ("first_token", 0), ("progress", 2), ("progress", 4), ("end", 4)
    ]


def test_each_record_is_one_write_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[bytes] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting_write)
    path = tmp_path / "progress.ndjson"
    rec = recorder(path)
    rec.start(None, 1)
    for _ in range(8):
        rec.step()
    rec.exception("RuntimeError", "boom")
    assert len(writes) == 5 and all(w.endswith(b"\n") and w.count(b"\n") == 1 for w in writes)
    assert path.read_bytes() == b"".join(writes)


def test_fsync_on_the_timer_and_at_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    rec = recorder(tmp_path / "a.ndjson", fsync_every_s=3600.0)
    rec.start(None, 1)
    for _ in range(12):
        rec.step()
    assert synced == []  # the timer has not expired: no fsync per record
    rec.end()
    assert len(synced) == 1  # ...but always one at the end
    synced.clear()
    rec = recorder(tmp_path / "b.ndjson", fsync_every_s=0.0)
    rec.start(None, 1)
    rec.step()
    assert len(synced) == 2  # expired timer: every record is synced


def test_existing_progress_is_never_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "progress.ndjson"
    path.write_bytes(b'{"old": true}\n')
    with pytest.raises(FileExistsError):
        recorder(path)
    assert path.read_bytes() == b'{"old": true}\n'


def test_no_event_after_the_terminal_one(tmp_path: Path) -> None:
    rec = recorder(tmp_path / "p.ndjson")
    rec.end()
    with pytest.raises(RuntimeError, match="already closed"):
        rec.start(None, 1)


def test_memory_probe_reads_rss_and_peak() -> None:
    probe = MemoryProbe()
    rss = probe.rss_bytes()
    assert rss is not None and rss > 10 * 2**20  # torch is loaded: tens of MiB at least
    assert probe.peak_rss_bytes() >= rss
    assert probe.cuda() is None  # CPU-only torch here: never initialises CUDA
    probe.close()


def test_cuda_fields_come_from_one_memory_stats_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA cannot exist on this machine: `is_initialized`/`memory_stats` are replaced by stand-ins (a mock, stated)."""
    calls: list[str | None] = []
    stats = {"allocated_bytes.all.current": 100, "reserved_bytes.all.current": 200, "allocated_bytes.all.peak": 300, "reserved_bytes.all.peak": 400}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: calls.append(device) or stats)
    assert memory_module.MemoryProbe("cuda:0").cuda() == memory_module.CudaMemory(100, 200, 300, 400)
    calls.clear()
    path = tmp_path / "progress.ndjson"
    rec = recorder(path, memory=MemoryProbe("cuda:1"))
    rec.start(None, 1)
    for _ in range(4):
        rec.step()
    rec.end()
    events = lines(path)
    assert calls == ["cuda:1"] * len(events)  # one memory_stats() per record (not one per field), for the run's device
    assert all((e["cuda_allocated_bytes"], e["cuda_reserved_bytes"], e["cuda_peak_allocated_bytes"]) == (100, 200, 300) for e in events)
