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
    word longer than a line, such as a long path, starts a line of its own and is cut across
    as many lines as it needs, so that no line passes ``width``); lines after the first
    indented by ``indent``.

    >>> print(fit(["padless shuffle: 9 lines in 0.1 s", "via memory;", "seed 5"], 36))
    padless shuffle: 9 lines in 0.1 s
      via memory; seed 5
    >>> print(fit(["warning: /a/very/long/folder/name/data.txt had no newline"], 24))
    warning:
      /a/very/long/folder/na
      me/data.txt had no
      newline
    """
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
        else:
            lines.append(part if not lines else indent + part)
    out: list[str] = []
    for i, line in enumerate(lines):
        if len(line) <= width:
            out.append(line)
        else:
            out.extend(_wrap_words(line.removeprefix(indent) if i else line, width, indent, i > 0))
    return "\n".join(out)


def _wrap_words(text: str, width: int, indent: str, indent_first: bool) -> list[str]:
    """``text`` at its spaces into lines of at most ``width`` columns (the first indented when
    ``indent_first``, the others always); a word too long for a line gets lines of its own."""
    room = max(1, width - len(indent))
    lines: list[str] = []
    current = indent if indent_first else ""
    for word in text.split():
        if current.strip() and len(current) + 1 + len(word) <= width:
            current += " " + word
        elif not current.strip() and len(current) + len(word) <= width:
            current += word
        elif len(indent) + len(word) <= width:
            lines.append(current)
            current = indent + word
        else:  # longer than any line: cut across lines of its own
            if current.strip():
                lines.append(current)
            chunks = [word[k : k + room] for k in range(0, len(word), room)]
            lines.extend(indent + c for c in chunks[:-1])
            current = indent + chunks[-1]
    if current.strip():
        lines.append(current)
    return lines
