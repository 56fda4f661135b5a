"""`safe_text`: model- and program-derived text made safe for a tokenizer, a log file and the terminal.

A program can raise `ValueError('\\ud800')`; its message reaches a task's feedback, the next prompt, the tokenizer
(`TypeError: TextEncodeInput` on a lone surrogate) and verbose printing (`UnicodeEncodeError`). Every such
string passes through `safe_text` at those boundaries.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL and the C1 controls: they move the cursor, clear the screen or start
# escape sequences on a terminal. NUL among them.
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe_text(text: object, *, terminal: bool = False) -> str:
    """Return `text` as a str that encodes to UTF-8: every lone surrogate (and anything else unencodable)
    becomes U+FFFD. With `terminal=True`, control characters other than tab and newline (ESC, NUL, carriage
    return, ...) are shown as `\\xNN` escapes, so printing cannot drive the terminal. Linear time."""
    s = text if isinstance(text, str) else str(text)
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:   # surrogates are the only code points of a str UTF-8 cannot encode
        s = _SURROGATE.sub("\ufffd", s)
    if terminal:
        s = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", s)
    return s


def safe_print(*parts: object) -> None:
    """`print` for model- and program-derived text (see `safe_text`, `terminal=True`)."""
    print(*(safe_text(p, terminal=True) for p in parts))
