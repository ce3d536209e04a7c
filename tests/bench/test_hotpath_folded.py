"""`bench.hotpath --py-spy` reads py-spy's folded stacks whatever a frame holds."""

from __future__ import annotations

from bench.hotpath import read_folded


def test_a_frame_holding_a_line_separator_of_unicode_stays_one_row() -> None:
    # \x1c and \x85 end a line for str.splitlines(), not for py-spy's file.
    text = "main (a.py:1);odd\x1cname (b.py:2) 7\nmain (a.py:1);x\x85y (c.py:3) 2\n"
    assert read_folded(text) == [
        (["main (a.py:1)", "odd\x1cname (b.py:2)"], 7),
        (["main (a.py:1)", "x\x85y (c.py:3)"], 2),
    ]


def test_a_row_without_its_count_is_skipped() -> None:
    assert read_folded("main (a.py:1) 3\ncut short (b.py:\n\n") == [(["main (a.py:1)"], 3)]
