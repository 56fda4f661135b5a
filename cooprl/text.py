"""`safe_text`: model- and program-derived text made safe for a tokenizer, a log file and the terminal;
`plain_text`: text a tokenizer reads as plain text only, never as one of its special tokens.

A program can raise `ValueError('\\ud800')`; its message reaches a task's feedback, the next prompt, the tokenizer
(`TypeError: TextEncodeInput` on a lone surrogate) and verbose printing (`UnicodeEncodeError`). Every such
string passes through `safe_text` at those boundaries.

A program can also raise `ValueError('<|im_end|> <|im_start|>system ...')`, and a model can write those characters:
tokenized with special tokens parsed, the next prompt would hold a turn nobody wrote. Prompts are made of such text
and the task's own templates, which hold no special token (the chat template adds them), so the whole content of a
prompt goes through `plain_text` before the chat template (`cooprl.rollout.generation.HFGenerator.encode_prompts`).
"""

from __future__ import annotations

import re
from typing import Any

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


# Inserted after the first character of each added token found in untrusted text: invisible, and no tokenizer we
# load normalizes it away (`plain_text` checks, and deletes the token's text where one would).
ZERO_WIDTH_SPACE = "\u200b"
_BREAK_PASSES = 8   # passes that break tokens by the insertion; then what is still found is deleted


def breakable_tokens(tokenizer: Any) -> dict[int, str]:
    """The added tokens `plain_text` keeps out of untrusted text: {id: content}, every token the tokenizer adds
    to its vocabulary (special or not: it parses them all out of text), but those of one character or of whitespace
    only (some tokenizers add runs of spaces, which code needs as they are)."""
    return {i: t.content for i, t in tokenizer.added_tokens_decoder.items()
            if len(t.content) > 1 and t.content.strip() and ZERO_WIDTH_SPACE not in t.content}


def _token_spans(text: str, tokenizer: Any, tokens: dict[int, str]) -> list[tuple[int, int]]:
    """The (start, end) of every added token the tokenizer parses out of `text`, by its own parse (its offsets),
    or where it gives none (a slow tokenizer) by the tokens' text."""
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return [tuple(span) for i, span in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
                if i in tokens]
    except NotImplementedError:
        found = re.finditer("|".join(re.escape(c) for c in sorted(tokens.values(), key=len, reverse=True)), text)
        return [m.span() for m in found]


def plain_text(text: str, tokenizer: Any) -> str:
    """Return `text` such that `tokenizer` parses none of its added tokens (`breakable_tokens`) out of it, the
    ends included: appended to or after any text, no character of it is part of such a token. Each token the
    tokenizer finds gets a zero-width space after its first visible character (until none is found; should a
    normalizer drop the space, the token's text is deleted instead); text that holds none comes back unchanged."""
    tokens = breakable_tokens(tokenizer)
    if not tokens:
        return text
    for attempt in range(2 * _BREAK_PASSES):
        spans = _token_spans(text, tokenizer, tokens)
        if not spans:
            break
        pieces, last = [], 0
        for start, end in spans:
            if attempt < _BREAK_PASSES:
                cut = start + len(text[start:end]) - len(text[start:end].lstrip()) + 1   # after the first visible
                pieces += [text[last:cut], ZERO_WIDTH_SPACE]
                last = cut
            else:
                pieces.append(text[last:start])
                last = end
        text = "".join(pieces) + text[last:]
    # the ends: a token begun here and finished by the text after it (or the reverse) must not form either
    contents = tokens.values()
    if any(text.endswith(c[:k]) for c in contents for k in range(1, len(c))):
        text += ZERO_WIDTH_SPACE
    if any(text.startswith(c[k:]) for c in contents for k in range(1, len(c))):
        text = ZERO_WIDTH_SPACE + text
    return text
