"""Readers finish on values a hostile snapshot can hold: chart ticks for progress times near the float limits."""

import json
from pathlib import Path

import pytest

from _analysis_helpers import copy_snapshot, edit_bytes, run_genrun, snapshots  # noqa: F401
from genrun.analysis._svg import TICKS, nice_ticks
from genrun.schemas import layout


@pytest.mark.parametrize("low, high", [(1e16, 1e16 + 2), (-1e308, 1e308), (0.0, 1e308), (1e300, 1e300), (0.0, 1e-320)])
def test_ticks_are_few_and_cover_the_range_near_the_float_limits(low: float, high: float) -> None:
    ticks = nice_ticks(low, high)
    assert 2 <= len(ticks) <= 3 * TICKS, ticks
    assert ticks == sorted(set(ticks)) and ticks[0] <= low and ticks[-1] >= high, ticks


def test_ticks_for_ordinary_ranges_are_unchanged() -> None:
    assert nice_ticks(0, 7) == [0.0, 2.0, 4.0, 6.0, 8.0]


@pytest.mark.parametrize("times", [(1e16, 1e16 + 2), (-1e308, 1e308)])
def test_html_report_of_progress_times_near_the_float_limits_finishes(times: tuple[float, float], snapshots, tmp_path: Path) -> None:  # noqa: F811
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")

    def retime(data: bytes) -> bytes:
        lines = [json.loads(line) for line in data.splitlines()]
        for number, record in enumerate(lines):
            record["t"] = times[0] if number < len(lines) // 2 else times[1]
        return b"".join(json.dumps(record).encode() + b"\n" for record in lines)

    edit_bytes(snapshot, layout.PROGRESS, retime)
    page = tmp_path / "page.html"
    done = run_genrun("report", snapshot, "--html", page, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert page.is_file() and b"<svg" in page.read_bytes()


@pytest.mark.parametrize("where", ["shape", "name"])
def test_a_safetensors_header_with_a_5000_digit_integer_is_damage_not_a_crash(where: str) -> None:
    import struct

    from genrun.analysis._safetensors import SafetensorsError, read_int_tensors

    huge = "9" * 5000
    header = (f'{{"x": {{"dtype": "I64", "shape": [{huge}], "data_offsets": [0, 8]}}}}' if where == "shape"
              else f'{{"{huge}": {{"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}}}}').encode()
    data = struct.pack("<Q", len(header)) + header + bytes(8)
    with pytest.raises(SafetensorsError) as raised:
        read_int_tensors(data)
    assert len(str(raised.value)) < 300, str(raised.value)


def test_a_sequence_key_with_a_5000_digit_index_is_not_a_row() -> None:
    from genrun.schemas.layout import sequence_index

    assert sequence_index("sequence_" + "9" * 5000) is None
    assert sequence_index("sequence_12") == 12 and sequence_index("sequence_0") == 0
