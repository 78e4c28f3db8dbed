"""Text that fits the terminal: its width (80 columns unless the terminal is wider, or
``COLUMNS`` says otherwise) and lines wrapped or cut to it."""

from __future__ import annotations

import shutil
import textwrap

MIN_WIDTH = 40  # narrower terminals get 40-column lines (a table cannot shrink further)


def terminal_width() -> int:
    """Columns to print in: ``COLUMNS`` when set, else the terminal's, else 80 (a pipe, a file),
    as ``shutil.get_terminal_size`` finds them; at least 40."""
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)


def wrap(text: str, width: int, *, indent: str = "  ") -> str:
    """``text`` wrapped at ``width`` columns, the lines after the first indented by ``indent``
    (a word longer than a line, such as a long path, is cut across lines).

    >>> print(wrap("padless shuffle: 200,000 lines in 0.02 s; seed 5", 30))
    padless shuffle: 200,000 lines
      in 0.02 s; seed 5
    """
    return textwrap.fill(
        text, width, subsequent_indent=indent, break_long_words=True, break_on_hyphens=False
    )


def cut_left(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, its start replaced by ``...`` when too long
    (for paths: the file name stays).

    >>> cut_left("/a/long/folder/plan.npz", 14)
    '...er/plan.npz'
    """
    if len(text) <= width:
        return text
    return "..." + text[len(text) - max(0, width - 3) :]


def fit(parts: list[str], width: int, *, indent: str = "  ") -> str:
    """The ``parts`` of a message joined by spaces into lines of at most ``width`` columns,
    a line breaking only between parts (a part longer than a line is wrapped at its words; a
    word longer than a line, such as a path, keeps a line of its own, whole, to be copied);
    lines after the first indented by ``indent``.

    >>> print(fit(["padless shuffle: 9 lines in 0.1 s", "via memory;", "seed 5"], 36))
    padless shuffle: 9 lines in 0.1 s
      via memory; seed 5
    """
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
        else:
            lines.append(part if not lines else indent + part)
    out = []
    for i, line in enumerate(lines):
        if len(line) <= width:
            out.append(line)
        else:
            first = indent if i else ""
            out.append(
                textwrap.fill(
                    line.removeprefix(first),
                    width,
                    initial_indent=first,
                    subsequent_indent=indent,
                    break_long_words=False,
                    break_on_hyphens=False,
                )
            )
    return "\n".join(out)
