"""The progress bar: redrawn in place on a terminal, one plain final line anywhere else."""
import io

from bpe_cffi.progress import Bar


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_bar_writes_one_plain_line_to_a_log():
    out = io.StringIO()
    bar = Bar("encode x", unit="B", stream=out)
    for done in (0, 500_000, 1_000_000):
        bar.update(done, 1_000_000, force=True)
    bar.close()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    assert text.count("\n") == 1 and "100.0%" in text and text.startswith("encode x")


def test_bar_redraws_in_place_on_a_terminal():
    out = FakeTTY()
    bar = Bar("merging", unit="merges", stream=out)
    bar.update(1, 4, force=True)
    bar.update(4, 4, force=True)
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and "4/4 merges" in text


def test_close_twice_writes_nothing_more():
    out = io.StringIO()
    bar = Bar("x", stream=out)
    bar.update(1, 2, force=True)
    bar.close()
    first = out.getvalue()
    bar.close()
    assert out.getvalue() == first
