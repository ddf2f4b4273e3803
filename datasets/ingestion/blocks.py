"""An oversized code block or table cut into pieces that are each still a valid block: a fence
keeps its fence lines, indented code its indent, a table its header rows."""

from __future__ import annotations

from markdown_it.tree import SyntaxTreeNode

# A fence's info string is a language tag and maybe attributes; a longer one is not
# repeated on every piece of a cut block.
_MAX_INFO_CHARS = 100


def cut_block(text: str, node: SyntaxTreeNode, start: int, end: int, limit: int) -> list[str]:
    """An oversized code block or table as valid blocks of at most `limit` characters."""
    token = node.token
    if node.type == "fence" and token is not None:
        info = token.info if len(token.info) <= _MAX_INFO_CHARS else ""
        body = token.content
        return _pack_lines(body, 0, len(body), limit,
                           opener=f"{token.markup}{info}\n", closer=f"\n{token.markup}")
    if node.type == "code_block" and token is not None:
        # Re-indented from the de-indented content, so a piece cut from a list item's code
        # (or a hard-cut line) is still indented code on its own.
        body = token.content
        return _pack_lines(body, 0, len(body), limit, indent="    ")
    # A table: every piece repeats the header and delimiter rows, so it is still a table.
    header_end = _line_end(text, _line_end(text, start, end) + 1, end)
    if header_end - start >= limit // 2:
        return _pack_lines(text, start, end, limit)  # a monstrous header is not repeated
    return _pack_lines(text, header_end + 1, end, limit, opener=text[start:header_end] + "\n")


def _line_end(text: str, start: int, end: int) -> int:
    newline = text.find("\n", start, end)
    return end if newline == -1 else newline


def _pack_lines(
    text: str, start: int, end: int, limit: int, *, opener: str = "", closer: str = "",
    indent: str = "",
) -> list[str]:
    """The lines of text[start:end] packed into `opener + lines + closer` of ≤ limit chars."""
    if len(opener) + len(closer) > limit // 2:
        opener = closer = ""  # a monstrous fence line is not repeated
    budget = limit - len(opener) - len(closer)
    width = budget - len(indent)
    pieces: list[str] = []
    lines: list[str] = []
    used = 0
    position = start
    while position < end:
        line_end = _line_end(text, position, end)
        # An overlong line is hard-cut: a piece must fit whatever the line.
        for cut in range(position, max(line_end, position + 1), width):
            fragment = indent + text[cut : min(cut + width, line_end)]
            if lines and used + 1 + len(fragment) > budget:
                pieces.append(opener + "\n".join(lines) + closer)
                lines, used = [], 0
            used += len(fragment) + (1 if lines else 0)
            lines.append(fragment)
        position = line_end + 1
    if lines:
        pieces.append(opener + "\n".join(lines) + closer)
    return pieces
