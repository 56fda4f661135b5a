"""Authoring source of the shipped cooperative problem set `coop.jsonl` (loaded as `dataset.name: coop`).

Every problem is original. Edit the problems here, as readable Python, then regenerate the jsonl:

    python envs/code_generation/data/coop_source.py

(`tests/envs/test_coop_set.py` checks that the jsonl matches this file.)

A problem is written with `_p(...)`:
- `entry_point`: the function the main agent writes (distinct, never a HumanEval entry point);
- `imports`: import lines the prompt starts with ("" for none);
- `prompt`: the signature and docstring (with 2-3 `>>>` examples), no body;
- `aux` / `main`: the reference split solution: `def aux(...)` doing a real sub-task and
  `def <entry_point>(...)` doing real work with aux's result;
- `asserts`: single-line `assert candidate(...) == ...` statements, one a line, that become `check`.
Task ids are `Coop/<position in PROBLEMS>`.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

OUT_FILE = Path(__file__).with_name("coop.jsonl")
PROBLEMS: list[dict] = []


def _clean(text: str) -> str:
    return textwrap.dedent(text).strip("\n") + "\n"


def _p(entry_point: str, prompt: str, aux: str, main: str, asserts: str, imports: str = "") -> None:
    body = _clean(prompt)
    PROBLEMS.append({
        "entry_point": entry_point,
        "prompt": (_clean(imports) + "\n\n" + body) if imports.strip() else body,
        "test": "def check(candidate):\n" + "".join(
            "    " + line.strip() + "\n" for line in _clean(asserts).splitlines() if line.strip()),
        "reference_aux": _clean(aux),
        "reference_main": _clean(main),
    })


def records() -> list[dict]:
    """Return the problems as jsonl records, in order, with their task ids."""
    return [{"task_id": f"Coop/{i}", "prompt": p["prompt"], "test": p["test"], "entry_point": p["entry_point"],
             "reference_aux": p["reference_aux"], "reference_main": p["reference_main"]}
            for i, p in enumerate(PROBLEMS)]


def render() -> str:
    """Return the text of coop.jsonl."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records())


def main() -> None:
    """Write coop.jsonl next to this file."""
    OUT_FILE.write_text(render(), encoding="utf-8")
    print(f"wrote {len(PROBLEMS)} problems to {OUT_FILE}")


# ----------------------------------------------------------------------------------------------------------------
# Strings
# ----------------------------------------------------------------------------------------------------------------

_p("compress_runs", '''
def compress_runs(text: str) -> str:
    """Run-length encode a string: every maximal run of one repeated character becomes the character
    followed by the run's length, and the length is left out when the run has length 1.
    Characters are compared exactly (case matters). The empty string encodes to "".
    >>> compress_runs("aaabcc")
    'a3bc2'
    >>> compress_runs("abc")
    'abc'
    """
''', '''
def aux(text):
    runs = []
    for ch in text:
        if runs and runs[-1][0] == ch:
            runs[-1][1] += 1
        else:
            runs.append([ch, 1])
    return [(ch, n) for ch, n in runs]
''', '''
def compress_runs(text):
    parts = []
    for ch, n in aux(text):
        parts.append(ch if n == 1 else ch + str(n))
    return "".join(parts)
''', '''
assert candidate("aaabcc") == "a3bc2"
assert candidate("abc") == "abc"
assert candidate("") == ""
assert candidate("z") == "z"
assert candidate("zz") == "z2"
assert candidate("aaaaaaaaaaaa") == "a12"
assert candidate("aAaa") == "aAa2"
assert candidate("  xx ") == " 2x2 "
''')

_p("expand_runs", '''
def expand_runs(code: str) -> str:
    """Decode a run-length code: the code is a sequence of letters, each optionally followed by a
    decimal count (possibly several digits); a letter without a count appears once.
    >>> expand_runs("a3bc2")
    'aaabcc'
    >>> expand_runs("x10")
    'xxxxxxxxxx'
    """
''', '''
def aux(code):
    pairs = []
    i = 0
    while i < len(code):
        letter = code[i]
        j = i + 1
        while j < len(code) and code[j].isdigit():
            j += 1
        count = int(code[i + 1:j]) if j > i + 1 else 1
        pairs.append((letter, count))
        i = j
    return pairs
''', '''
def expand_runs(code):
    out = []
    for letter, count in aux(code):
        out.append(letter * count)
    return "".join(out)
''', '''
assert candidate("a3bc2") == "aaabcc"
assert candidate("x10") == "xxxxxxxxxx"
assert candidate("") == ""
assert candidate("abc") == "abc"
assert candidate("a1b1") == "ab"
assert candidate("q2w3") == "qqwww"
assert candidate("z12") == "zzzzzzzzzzzz"
assert candidate("a0b") == "b"
''')

_p("headline_case", '''
def headline_case(title: str) -> str:
    """Format a title: words are separated by single spaces in the result (extra spaces are dropped),
    every word is lower-cased and then has its first letter capitalised, except the minor words
    "a", "an", "the", "of", "and", "in", "on" which stay lower case unless they are the first or
    the last word. An empty or blank title gives "".
    >>> headline_case("the lord  of the RINGS")
    'The Lord of the Rings'
    >>> headline_case("what it is made of")
    'What It Is Made Of'
    """
''', '''
def aux(title):
    return [w.lower() for w in title.split()]
''', '''
def headline_case(title):
    minor = {"a", "an", "the", "of", "and", "in", "on"}
    words = aux(title)
    out = []
    for i, w in enumerate(words):
        if w in minor and 0 < i < len(words) - 1:
            out.append(w)
        else:
            out.append(w[:1].upper() + w[1:])
    return " ".join(out)
''', '''
assert candidate("the lord  of the RINGS") == "The Lord of the Rings"
assert candidate("what it is made of") == "What It Is Made Of"
assert candidate("") == ""
assert candidate("   ") == ""
assert candidate("a") == "A"
assert candidate("war and peace") == "War and Peace"
assert candidate("an apple a day") == "An Apple a Day"
assert candidate("in the end on") == "In the End On"
''')

_p("shared_prefix", '''
def shared_prefix(words: List[str]) -> str:
    """Return the longest string that is a prefix of every word in the list.
    An empty list gives "".
    >>> shared_prefix(["interview", "internet", "interval"])
    'inter'
    >>> shared_prefix(["dog", "cat"])
    ''
    """
''', '''
def aux(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return a[:n]
''', '''
def shared_prefix(words):
    if not words:
        return ""
    prefix = words[0]
    for w in words[1:]:
        prefix = aux(prefix, w)
        if prefix == "":
            break
    return prefix
''', '''
assert candidate(["interview", "internet", "interval"]) == "inter"
assert candidate(["dog", "cat"]) == ""
assert candidate([]) == ""
assert candidate(["alone"]) == "alone"
assert candidate(["ab", "abc", "abcd"]) == "ab"
assert candidate(["same", "same"]) == "same"
assert candidate(["abc", "", "abd"]) == ""
assert candidate(["prefix", "pre", "prey"]) == "pre"
''', imports="from typing import List")

_p("group_anagrams", '''
def group_anagrams(words: List[str]) -> List[List[str]]:
    """Group words that are anagrams of each other (same letters with the same counts, case-sensitive).
    Groups are listed in the order of their first word's appearance and each group keeps the
    input order of its words.
    >>> group_anagrams(["eat", "tea", "tan", "ate", "nat", "bat"])
    [['eat', 'tea', 'ate'], ['tan', 'nat'], ['bat']]
    >>> group_anagrams([])
    []
    """
''', '''
def aux(word):
    return "".join(sorted(word))
''', '''
def group_anagrams(words):
    groups = {}
    order = []
    for w in words:
        key = aux(w)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(w)
    return [groups[k] for k in order]
''', '''
assert candidate(["eat", "tea", "tan", "ate", "nat", "bat"]) == [["eat", "tea", "ate"], ["tan", "nat"], ["bat"]]
assert candidate([]) == []
assert candidate(["a"]) == [["a"]]
assert candidate(["ab", "ba", "ab"]) == [["ab", "ba", "ab"]]
assert candidate(["Ab", "bA", "ba"]) == [["Ab", "bA"], ["ba"]]
assert candidate(["", "x", ""]) == [["", ""], ["x"]]
assert candidate(["abc", "abd", "cab"]) == [["abc", "cab"], ["abd"]]
''', imports="from typing import List")

_p("rotate_letters", '''
def rotate_letters(text: str, shift: int) -> str:
    """Shift every ASCII letter `shift` places forward in the alphabet, wrapping around from z to a,
    keeping its case; `shift` may be negative or larger than 26. Other characters are unchanged.
    >>> rotate_letters("abc xyz", 3)
    'def abc'
    >>> rotate_letters("Hello, World!", -1)
    'Gdkkn, Vnqkc!'
    """
''', '''
def aux(ch, shift):
    if "a" <= ch <= "z":
        base = ord("a")
    elif "A" <= ch <= "Z":
        base = ord("A")
    else:
        return ch
    return chr(base + (ord(ch) - base + shift) % 26)
''', '''
def rotate_letters(text, shift):
    result = ""
    for ch in text:
        result += aux(ch, shift)
    return result
''', '''
assert candidate("abc xyz", 3) == "def abc"
assert candidate("Hello, World!", -1) == "Gdkkn, Vnqkc!"
assert candidate("", 5) == ""
assert candidate("Zz", 1) == "Aa"
assert candidate("abc", 26) == "abc"
assert candidate("abc", 27) == "bcd"
assert candidate("a-b_9", -27) == "z-a_9"
assert candidate("Mm", 13) == "Zz"
''')

_p("vowel_heavy_words", '''
def vowel_heavy_words(sentence: str) -> List[str]:
    """Return the words of the sentence (split on whitespace) that contain strictly more vowels than
    consonants, in their original order and spelling. Vowels are a, e, i, o, u in either case;
    consonants are the other letters; non-letters count as neither.
    >>> vowel_heavy_words("The audio area is EU")
    ['audio', 'area', 'EU']
    >>> vowel_heavy_words("strength in numbers")
    []
    """
''', '''
def aux(word):
    vowels = 0
    consonants = 0
    for ch in word.lower():
        if ch in "aeiou":
            vowels += 1
        elif ch.isalpha():
            consonants += 1
    return vowels, consonants
''', '''
def vowel_heavy_words(sentence):
    chosen = []
    for word in sentence.split():
        v, c = aux(word)
        if v > c:
            chosen.append(word)
    return chosen
''', '''
assert candidate("The audio area is EU") == ["audio", "area", "EU"]
assert candidate("strength in numbers") == []
assert candidate("") == []
assert candidate("io ab") == ["io"]
assert candidate("ee!! x1") == ["ee!!"]
assert candidate("A E i") == ["A", "E", "i"]
assert candidate("tea toe sky") == ["tea", "toe"]
assert candidate("123 ...") == []
''', imports="from typing import List")

_p("mask_digits", '''
def mask_digits(text: str, keep: int) -> str:
    """Replace every decimal digit of the text by '#', except the last `keep` digits (counted over the
    whole text), which stay visible. Non-digit characters are never changed. `keep` is >= 0.
    >>> mask_digits("4111-2222-3333-4444", 4)
    '####-####-####-4444'
    >>> mask_digits("call 555 0199", 2)
    'call ### ##99'
    """
''', '''
def aux(text):
    return [i for i, ch in enumerate(text) if ch.isdigit()]
''', '''
def mask_digits(text, keep):
    positions = aux(text)
    hidden = set(positions[:max(0, len(positions) - keep)])
    return "".join("#" if i in hidden else ch for i, ch in enumerate(text))
''', '''
assert candidate("4111-2222-3333-4444", 4) == "####-####-####-4444"
assert candidate("call 555 0199", 2) == "call ### ##99"
assert candidate("", 3) == ""
assert candidate("no digits", 0) == "no digits"
assert candidate("12345", 0) == "#####"
assert candidate("12345", 5) == "12345"
assert candidate("12345", 9) == "12345"
assert candidate("a1b2c3", 1) == "a#b#c3"
''')

_p("top_words", '''
def top_words(text: str, k: int) -> List[Tuple[str, int]]:
    """Return the `k` most frequent words of the text with their counts. A word is a maximal run of
    ASCII letters, compared case-insensitively and reported in lower case. Order by count, highest
    first, and break ties alphabetically. If there are fewer than `k` distinct words return them all.
    >>> top_words("the cat and the hat and the bat", 2)
    [('the', 3), ('and', 2)]
    >>> top_words("B a b A c", 5)
    [('a', 2), ('b', 2), ('c', 1)]
    """
''', '''
def aux(text):
    words = []
    current = ""
    for ch in text:
        if ch.isascii() and ch.isalpha():
            current += ch.lower()
        else:
            if current:
                words.append(current)
            current = ""
    if current:
        words.append(current)
    return words
''', '''
def top_words(text, k):
    counts = {}
    for w in aux(text):
        counts[w] = counts.get(w, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ranked[:k]
''', '''
assert candidate("the cat and the hat and the bat", 2) == [("the", 3), ("and", 2)]
assert candidate("B a b A c", 5) == [("a", 2), ("b", 2), ("c", 1)]
assert candidate("", 3) == []
assert candidate("one", 0) == []
assert candidate("it's it, IT!", 1) == [("it", 3)]
assert candidate("x1y2x", 2) == [("x", 2), ("y", 1)]
assert candidate("zeta alpha zeta beta alpha zeta", 3) == [("zeta", 3), ("alpha", 2), ("beta", 1)]
''', imports="from typing import List, Tuple")

_p("snake_to_camel", '''
def snake_to_camel(name: str) -> str:
    """Convert a snake_case identifier to lowerCamelCase. Underscores separate words; leading,
    trailing and repeated underscores create no empty words. The first word is written in lower
    case, every later word with its first letter upper case and the rest lower case.
    >>> snake_to_camel("max_retry_count")
    'maxRetryCount'
    >>> snake_to_camel("__HTTP_response__")
    'httpResponse'
    """
''', '''
def aux(name):
    return [part.lower() for part in name.split("_") if part]
''', '''
def snake_to_camel(name):
    words = aux(name)
    if not words:
        return ""
    return words[0] + "".join(w[0].upper() + w[1:] for w in words[1:])
''', '''
assert candidate("max_retry_count") == "maxRetryCount"
assert candidate("__HTTP_response__") == "httpResponse"
assert candidate("") == ""
assert candidate("___") == ""
assert candidate("single") == "single"
assert candidate("a_b_c") == "aBC"
assert candidate("x__y") == "xY"
assert candidate("Already_Camel_CASE") == "alreadyCamelCase"
''')

_p("camel_to_snake", '''
def camel_to_snake(name: str) -> str:
    """Convert a camelCase or PascalCase identifier to snake_case: a new word starts at every upper-case
    letter, and every word is lower-cased; words are joined with single underscores. Digits stay
    attached to the word before them.
    >>> camel_to_snake("parseHttpRequest")
    'parse_http_request'
    >>> camel_to_snake("Version2Point")
    'version2_point'
    """
''', '''
def aux(name):
    words = []
    for ch in name:
        if ch.isupper() or not words:
            words.append(ch)
        else:
            words[-1] += ch
    return words
''', '''
def camel_to_snake(name):
    result = ""
    for i, word in enumerate(aux(name)):
        if i > 0:
            result += "_"
        result += word.lower()
    return result
''', '''
assert candidate("parseHttpRequest") == "parse_http_request"
assert candidate("Version2Point") == "version2_point"
assert candidate("") == ""
assert candidate("x") == "x"
assert candidate("X") == "x"
assert candidate("ABC") == "a_b_c"
assert candidate("getID2") == "get_i_d2"
assert candidate("simple") == "simple"
''')

_p("bracket_depth", '''
def bracket_depth(text: str) -> int:
    """Return the maximum nesting depth of the brackets (), [] and {} in the text, or -1 if the
    brackets are not balanced (a closer without a matching opener of the same kind, wrong order, or
    openers left unclosed). Other characters are ignored; a text without brackets has depth 0.
    >>> bracket_depth("f(a[1], {b: (c)})")
    3
    >>> bracket_depth("(]")
    -1
    """
''', '''
def aux(text):
    pairs = {")": "(", "]": "[", "}": "{"}
    stack = []
    for ch in text:
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack
''', '''
def bracket_depth(text):
    if not aux(text):
        return -1
    depth = 0
    deepest = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest
''', '''
assert candidate("f(a[1], {b: (c)})") == 3
assert candidate("(]") == -1
assert candidate("") == 0
assert candidate("no brackets") == 0
assert candidate("()()()") == 1
assert candidate("((((x))))") == 4
assert candidate("(()") == -1
assert candidate(")(") == -1
assert candidate("[{()}]{}") == 3
''')

_p("sum_by_key", '''
def sum_by_key(record: str) -> Dict[str, int]:
    """Parse a record of the form "key=value;key=value;..." whose values are integers (possibly
    negative) and return the total of the values of each key. Spaces around keys and values are
    ignored, and empty items (e.g. from a trailing ";") are skipped.
    >>> sum_by_key("a=1;b=2;a=5")
    {'a': 6, 'b': 2}
    >>> sum_by_key(" x = -3 ; ; y=4;")
    {'x': -3, 'y': 4}
    """
''', '''
def aux(record):
    pairs = []
    for item in record.split(";"):
        if not item.strip():
            continue
        key, value = item.split("=", 1)
        pairs.append((key.strip(), int(value.strip())))
    return pairs
''', '''
def sum_by_key(record):
    totals = {}
    for key, value in aux(record):
        totals[key] = totals.get(key, 0) + value
    return totals
''', '''
assert candidate("a=1;b=2;a=5") == {"a": 6, "b": 2}
assert candidate(" x = -3 ; ; y=4;") == {"x": -3, "y": 4}
assert candidate("") == {}
assert candidate(";;") == {}
assert candidate("k=0") == {"k": 0}
assert candidate("a=10;a=-10;b=7") == {"a": 0, "b": 7}
assert candidate("long_key=123;long_key=1") == {"long_key": 124}
''', imports="from typing import Dict")

_p("config_value", '''
def config_value(lines: List[str], key: str) -> Union[int, str, None]:
    """Look a key up in the lines of a small configuration file. Each line is "key = value"; anything
    after a '#' is a comment, and lines without '=' (blank or comment-only lines) are skipped. Keys and
    values are stripped of spaces. A later line overrides an earlier one with the same key. Return the
    value as an int when it is a non-empty string of decimal digits, otherwise as a string; return
    None if the key is absent.
    >>> config_value(["port = 8080  # default", "host = example.org"], "port")
    8080
    >>> config_value(["a = 1", "a = two"], "a")
    'two'
    >>> config_value(["# a = 1"], "a") is None
    True
    """
''', '''
def aux(lines):
    settings = {}
    for line in lines:
        line = line.split("#", 1)[0]
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        settings[key.strip()] = value.strip()
    return settings
''', '''
def config_value(lines, key):
    settings = aux(lines)
    if key not in settings:
        return None
    value = settings[key]
    if value.isdigit():
        return int(value)
    return value
''', '''
assert candidate(["port = 8080  # default", "host = example.org"], "port") == 8080
assert candidate(["port = 8080  # default", "host = example.org"], "host") == "example.org"
assert candidate(["a = 1", "a = two"], "a") == "two"
assert candidate(["# a = 1"], "a") is None
assert candidate([], "a") is None
assert candidate(["x=", "y = 3"], "x") == ""
assert candidate(["level = 007"], "level") == 7
assert candidate(["name = v2 # v1 was old"], "name") == "v2"
assert candidate(["b = 2", "#b = 9", ""], "b") == 2
assert candidate(["n = -5"], "n") == "-5"
''', imports="from typing import List, Union")

_p("widest_gap_minutes", '''
def widest_gap_minutes(times: List[str]) -> int:
    """Given clock times "HH:MM" (24-hour) of events on one day, in any order, return the largest number
    of minutes between two consecutive events after sorting them by time. Fewer than two times give 0.
    >>> widest_gap_minutes(["09:15", "08:00", "12:30"])
    195
    >>> widest_gap_minutes(["23:59"])
    0
    """
''', '''
def aux(clock):
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)
''', '''
def widest_gap_minutes(times):
    values = sorted(aux(t) for t in times)
    best = 0
    for i in range(1, len(values)):
        best = max(best, values[i] - values[i - 1])
    return best
''', '''
assert candidate(["09:15", "08:00", "12:30"]) == 195
assert candidate(["23:59"]) == 0
assert candidate([]) == 0
assert candidate(["00:00", "23:59"]) == 1439
assert candidate(["10:00", "10:00"]) == 0
assert candidate(["01:01", "00:59", "01:00"]) == 1
assert candidate(["12:00", "06:30", "18:45", "07:00"]) == 405
''', imports="from typing import List")

_p("clock_after", '''
def clock_after(start: str, minutes: int) -> str:
    """Return the 24-hour clock time "HH:MM" reached `minutes` minutes after the time `start`
    (also "HH:MM"), wrapping past midnight; `minutes` may be negative or span several days.
    >>> clock_after("23:30", 45)
    '00:15'
    >>> clock_after("08:05", -10)
    '07:55'
    """
''', '''
def aux(clock):
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)
''', '''
def clock_after(start, minutes):
    total = (aux(start) + minutes) % (24 * 60)
    hours, mins = divmod(total, 60)
    return f"{hours:02d}:{mins:02d}"
''', '''
assert candidate("23:30", 45) == "00:15"
assert candidate("08:05", -10) == "07:55"
assert candidate("00:00", 0) == "00:00"
assert candidate("00:00", -1) == "23:59"
assert candidate("12:00", 1440) == "12:00"
assert candidate("12:00", 3 * 1440 + 61) == "13:01"
assert candidate("09:59", 1) == "10:00"
assert candidate("05:07", 53) == "06:00"
''')

_p("glyph_value", '''
def glyph_value(code: str) -> int:
    """Decode a number written in a made-up glyph system. The glyphs are 'o' = 1, 'f' = 5, 't' = 10,
    'h' = 50 and 'k' = 100. Values are added up, except that a glyph written directly before a
    glyph of larger value is subtracted instead (as in "ot" = 9). The empty code is 0.
    >>> glyph_value("tfoo")
    17
    >>> glyph_value("kth")
    140
    """
''', '''
def aux(code):
    table = {"o": 1, "f": 5, "t": 10, "h": 50, "k": 100}
    return [table[g] for g in code]
''', '''
def glyph_value(code):
    values = aux(code)
    total = 0
    for i, v in enumerate(values):
        if i + 1 < len(values) and v < values[i + 1]:
            total -= v
        else:
            total += v
    return total
''', '''
assert candidate("tfoo") == 17
assert candidate("kth") == 140
assert candidate("") == 0
assert candidate("o") == 1
assert candidate("ot") == 9
assert candidate("of") == 4
assert candidate("tt") == 20
assert candidate("kkhtot") == 269
assert candidate("ok") == 99
''')

_p("to_glyphs", '''
def to_glyphs(number: int) -> str:
    """Write a number from 0 to 399 in a made-up glyph system: 'k' = 100, 'h' = 50, 't' = 10,
    'f' = 5, 'o' = 1. Hundreds are written as that many 'k'. The tens digit and the units digit are
    each written like a Roman numeral digit, with the glyphs (t, h, k) for tens and (o, f, t) for
    units: 1-3 repeat the one-glyph, 4 is one+five ("of"), 5-8 are five followed by ones, 9 is
    one+ten ("ot"). 0 is written as "".
    >>> to_glyphs(17)
    'tfoo'
    >>> to_glyphs(94)
    'tkof'
    """
''', '''
def aux(digit, one, five, ten):
    if digit == 9:
        return one + ten
    if digit >= 5:
        return five + one * (digit - 5)
    if digit == 4:
        return one + five
    return one * digit
''', '''
def to_glyphs(number):
    hundreds = number // 100
    tens = number // 10 % 10
    units = number % 10
    return "k" * hundreds + aux(tens, "t", "h", "k") + aux(units, "o", "f", "t")
''', '''
assert candidate(17) == "tfoo"
assert candidate(94) == "tkof"
assert candidate(0) == ""
assert candidate(4) == "of"
assert candidate(9) == "ot"
assert candidate(40) == "th"
assert candidate(399) == "kkktkot"
assert candidate(388) == "kkkhtttfooo"
assert candidate(250) == "kkh"
assert candidate(65) == "htf"
''')

# ----------------------------------------------------------------------------------------------------------------
# Lists and counting
# ----------------------------------------------------------------------------------------------------------------

_p("second_highest", '''
def second_highest(values: List[int]) -> Optional[int]:
    """Return the second largest distinct value of the list, or None if it has fewer than two
    distinct values.
    >>> second_highest([4, 9, 9, 2])
    4
    >>> second_highest([7, 7]) is None
    True
    """
''', '''
def aux(values):
    return sorted(set(values), reverse=True)
''', '''
def second_highest(values):
    distinct = aux(values)
    if len(distinct) < 2:
        return None
    return distinct[1]
''', '''
assert candidate([4, 9, 9, 2]) == 4
assert candidate([7, 7]) is None
assert candidate([]) is None
assert candidate([1]) is None
assert candidate([1, 2]) == 1
assert candidate([-5, -1, -3]) == -3
assert candidate([3, 3, 2, 2, 1]) == 2
''', imports="from typing import List, Optional")

_p("chunk_totals", '''
def chunk_totals(values: List[int], size: int) -> List[int]:
    """Cut the list into consecutive chunks of `size` elements (the last chunk may be shorter) and
    return the sum of each chunk. `size` is at least 1.
    >>> chunk_totals([1, 2, 3, 4, 5], 2)
    [3, 7, 5]
    >>> chunk_totals([], 3)
    []
    """
''', '''
def aux(values, size):
    return [values[i:i + size] for i in range(0, len(values), size)]
''', '''
def chunk_totals(values, size):
    totals = []
    for chunk in aux(values, size):
        total = 0
        for v in chunk:
            total += v
        totals.append(total)
    return totals
''', '''
assert candidate([1, 2, 3, 4, 5], 2) == [3, 7, 5]
assert candidate([], 3) == []
assert candidate([1, 2, 3], 1) == [1, 2, 3]
assert candidate([1, 2, 3], 3) == [6]
assert candidate([1, 2, 3], 10) == [6]
assert candidate([5, -5, 2, 2, 9, 1, 0], 3) == [2, 12, 0]
''', imports="from typing import List")

_p("rotate_to_smallest", '''
def rotate_to_smallest(values: List[int]) -> List[int]:
    """Rotate the list (move a prefix to the end) so that it starts at the first occurrence of its
    smallest value. An empty list stays empty.
    >>> rotate_to_smallest([5, 7, 1, 3, 1])
    [1, 3, 1, 5, 7]
    >>> rotate_to_smallest([2, 2])
    [2, 2]
    """
''', '''
def aux(values):
    best = 0
    for i in range(1, len(values)):
        if values[i] < values[best]:
            best = i
    return best
''', '''
def rotate_to_smallest(values):
    if not values:
        return []
    k = aux(values)
    return values[k:] + values[:k]
''', '''
assert candidate([5, 7, 1, 3, 1]) == [1, 3, 1, 5, 7]
assert candidate([2, 2]) == [2, 2]
assert candidate([]) == []
assert candidate([9]) == [9]
assert candidate([3, 2, 1]) == [1, 3, 2]
assert candidate([0, 4, -1, 6]) == [-1, 6, 0, 4]
assert candidate([1, 2, 3]) == [1, 2, 3]
''', imports="from typing import List")

_p("longest_rising_run", '''
def longest_rising_run(values: List[int]) -> List[int]:
    """Return the longest contiguous stretch of the list in which every element is strictly larger
    than the one before it. On a tie, return the stretch that comes first. An empty list gives [].
    >>> longest_rising_run([1, 3, 2, 4, 6, 5])
    [2, 4, 6]
    >>> longest_rising_run([3, 3, 3])
    [3]
    >>> longest_rising_run([1, 2, 0, 5])
    [1, 2]
    """
''', '''
def aux(values):
    runs = []
    for v in values:
        if runs and v > runs[-1][-1]:
            runs[-1].append(v)
        else:
            runs.append([v])
    return runs
''', '''
def longest_rising_run(values):
    best = []
    for run in aux(values):
        if len(run) > len(best):
            best = run
    return best
''', '''
assert candidate([1, 3, 2, 4, 6, 5]) == [2, 4, 6]
assert candidate([3, 3, 3]) == [3]
assert candidate([]) == []
assert candidate([1, 2, 0, 5]) == [1, 2]
assert candidate([5, 4, 3]) == [5]
assert candidate([1, 2, 3, 4]) == [1, 2, 3, 4]
assert candidate([2, 1, 2, 3, 1, 2, 3, 4]) == [1, 2, 3, 4]
''', imports="from typing import List")

_p("merge_unique_sorted", '''
def merge_unique_sorted(first: List[int], second: List[int]) -> List[int]:
    """Both lists are sorted in ascending order (and may hold repeats). Return one ascending list of
    every value that occurs in either list, each value once.
    >>> merge_unique_sorted([1, 3, 3, 5], [2, 3, 6])
    [1, 2, 3, 5, 6]
    >>> merge_unique_sorted([], [4, 4])
    [4]
    """
''', '''
def aux(first, second):
    i = j = 0
    merged = []
    while i < len(first) and j < len(second):
        if first[i] <= second[j]:
            merged.append(first[i])
            i += 1
        else:
            merged.append(second[j])
            j += 1
    return merged + first[i:] + second[j:]
''', '''
def merge_unique_sorted(first, second):
    result = []
    for v in aux(first, second):
        if not result or result[-1] != v:
            result.append(v)
    return result
''', '''
assert candidate([1, 3, 3, 5], [2, 3, 6]) == [1, 2, 3, 5, 6]
assert candidate([], [4, 4]) == [4]
assert candidate([], []) == []
assert candidate([1, 2], []) == [1, 2]
assert candidate([5, 6], [1, 2]) == [1, 2, 5, 6]
assert candidate([-2, 0, 0], [-2, -1, 0, 7]) == [-2, -1, 0, 7]
assert candidate([1, 1, 1], [1]) == [1]
''', imports="from typing import List")

_p("window_averages", '''
def window_averages(values: List[float], width: int) -> List[float]:
    """Return the average of every window of `width` consecutive values, from left to right
    (len(values) - width + 1 of them; none when the list is shorter than `width`). `width` >= 1.
    >>> window_averages([1, 2, 3, 4], 2)
    [1.5, 2.5, 3.5]
    >>> window_averages([1, 2], 3)
    []
    """
''', '''
def aux(values, width):
    sums = []
    current = sum(values[:width])
    for i in range(width, len(values) + 1):
        sums.append(current)
        if i < len(values):
            current += values[i] - values[i - width]
    return sums
''', '''
def window_averages(values, width):
    if len(values) < width:
        return []
    return [s / width for s in aux(values, width)]
''', '''
assert candidate([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]
assert candidate([1, 2], 3) == []
assert candidate([], 1) == []
assert candidate([4, 8, 6], 1) == [4.0, 8.0, 6.0]
assert candidate([4, 8, 6], 3) == [6.0]
assert candidate([2, 4, 6, 8, 10], 4) == [5.0, 7.0]
assert candidate([1, -1, 1, -1], 2) == [0.0, 0.0, 0.0]
''', imports="from typing import List")

_p("strict_majority", '''
def strict_majority(values: List[int]) -> Optional[int]:
    """Return the value that occurs in more than half of the positions of the list, or None if no
    value does.
    >>> strict_majority([3, 1, 3, 3, 2])
    3
    >>> strict_majority([1, 2, 1, 2]) is None
    True
    """
''', '''
def aux(values):
    counts = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return counts
''', '''
def strict_majority(values):
    for value, count in aux(values).items():
        if count * 2 > len(values):
            return value
    return None
''', '''
assert candidate([3, 1, 3, 3, 2]) == 3
assert candidate([1, 2, 1, 2]) is None
assert candidate([]) is None
assert candidate([8]) == 8
assert candidate([4, 4, 5]) == 4
assert candidate([1, 2, 3]) is None
assert candidate([0, 0, 1, 0]) == 0
''', imports="from typing import List, Optional")

_p("dominant_elements", '''
def dominant_elements(values: List[int]) -> List[int]:
    """Return, in their original order, the elements that are strictly greater than every element
    to their right (the last element always qualifies).
    >>> dominant_elements([16, 17, 4, 3, 5, 2])
    [17, 5, 2]
    >>> dominant_elements([2, 2])
    [2]
    """
''', '''
def aux(values):
    result = [0] * len(values)
    best = None
    for i in range(len(values) - 1, -1, -1):
        result[i] = best
        if best is None or values[i] > best:
            best = values[i]
    return result
''', '''
def dominant_elements(values):
    right_max = aux(values)
    chosen = []
    for v, m in zip(values, right_max):
        if m is None or v > m:
            chosen.append(v)
    return chosen
''', '''
assert candidate([16, 17, 4, 3, 5, 2]) == [17, 5, 2]
assert candidate([2, 2]) == [2]
assert candidate([]) == []
assert candidate([7]) == [7]
assert candidate([1, 2, 3]) == [3]
assert candidate([3, 2, 1]) == [3, 2, 1]
assert candidate([-1, -5, -2]) == [-1, -2]
''', imports="from typing import List")

_p("balance_point", '''
def balance_point(values: List[int]) -> int:
    """Return the smallest index i such that the sum of the elements before position i equals the
    sum of the elements after it (an empty side sums to 0), or -1 if there is none.
    >>> balance_point([1, 7, 3, 6, 5, 6])
    3
    >>> balance_point([1, 2, 3])
    -1
    """
''', '''
def aux(values):
    sums = [0]
    for v in values:
        sums.append(sums[-1] + v)
    return sums
''', '''
def balance_point(values):
    prefix = aux(values)
    total = prefix[-1]
    for i in range(len(values)):
        if prefix[i] == total - prefix[i + 1]:
            return i
    return -1
''', '''
assert candidate([1, 7, 3, 6, 5, 6]) == 3
assert candidate([1, 2, 3]) == -1
assert candidate([]) == -1
assert candidate([5]) == 0
assert candidate([2, 1, -1]) == 0
assert candidate([1, -1, 4]) == 2
assert candidate([0, 0]) == 0
assert candidate([3, 1, 2, 4]) == 2
assert candidate([1, 1]) == -1
''', imports="from typing import List")

_p("inversion_count", '''
def inversion_count(values: List[int]) -> int:
    """Count the pairs of positions i < j with values[i] > values[j].
    >>> inversion_count([3, 1, 2])
    2
    >>> inversion_count([1, 2, 2])
    0
    """
''', '''
def aux(values, i):
    return sum(1 for v in values[i + 1:] if v < values[i])
''', '''
def inversion_count(values):
    total = 0
    for i in range(len(values)):
        total += aux(values, i)
    return total
''', '''
assert candidate([3, 1, 2]) == 2
assert candidate([1, 2, 2]) == 0
assert candidate([]) == 0
assert candidate([5]) == 0
assert candidate([4, 3, 2, 1]) == 6
assert candidate([2, 2, 1]) == 2
assert candidate([1, 5, 2, 4, 3]) == 4
''', imports="from typing import List")

_p("dense_ranks", '''
def dense_ranks(scores: List[int]) -> List[int]:
    """Return the dense rank of each score: the highest score has rank 1, equal scores share a rank,
    and the next lower distinct score gets the next rank (no gaps).
    >>> dense_ranks([50, 80, 80, 65])
    [3, 1, 1, 2]
    >>> dense_ranks([])
    []
    """
''', '''
def aux(scores):
    return sorted(set(scores), reverse=True)
''', '''
def dense_ranks(scores):
    rank_of = {}
    for position, score in enumerate(aux(scores)):
        rank_of[score] = position + 1
    return [rank_of[s] for s in scores]
''', '''
assert candidate([50, 80, 80, 65]) == [3, 1, 1, 2]
assert candidate([]) == []
assert candidate([7]) == [1]
assert candidate([1, 1, 1]) == [1, 1, 1]
assert candidate([1, 2, 3]) == [3, 2, 1]
assert candidate([-1, 0, -1, 10]) == [3, 2, 3, 1]
''', imports="from typing import List")

_p("absent_numbers", '''
def absent_numbers(values: List[int], limit: int) -> List[int]:
    """Return, in ascending order, the numbers from 1 to `limit` (inclusive) that do not occur in
    the list. Values outside that range are ignored.
    >>> absent_numbers([3, 1, 7, 3], 5)
    [2, 4, 5]
    >>> absent_numbers([1, 2], 2)
    []
    """
''', '''
def aux(values, limit):
    seen = [False] * (limit + 1)
    for v in values:
        if 1 <= v <= limit:
            seen[v] = True
    return seen
''', '''
def absent_numbers(values, limit):
    seen = aux(values, limit)
    missing = []
    for n in range(1, limit + 1):
        if not seen[n]:
            missing.append(n)
    return missing
''', '''
assert candidate([3, 1, 7, 3], 5) == [2, 4, 5]
assert candidate([1, 2], 2) == []
assert candidate([], 0) == []
assert candidate([], 3) == [1, 2, 3]
assert candidate([0, -1, 4], 4) == [1, 2, 3]
assert candidate([2], 1) == [1]
assert candidate([5, 1], 6) == [2, 3, 4, 6]
''', imports="from typing import List")

_p("digit_tally", '''
def digit_tally(number: int) -> List[int]:
    """Return a list of 10 counts: position d holds how many times the digit d occurs in the decimal
    writing of the number (the sign of a negative number is ignored; 0 is written "0").
    >>> digit_tally(1002)
    [2, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    >>> digit_tally(-99)
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 2]
    """
''', '''
def aux(number):
    number = abs(number)
    digits = [number % 10]
    number //= 10
    while number > 0:
        digits.append(number % 10)
        number //= 10
    return digits
''', '''
def digit_tally(number):
    counts = [0] * 10
    for d in aux(number):
        counts[d] += 1
    return counts
''', '''
assert candidate(1002) == [2, 1, 1, 0, 0, 0, 0, 0, 0, 0]
assert candidate(-99) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 2]
assert candidate(0) == [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
assert candidate(7) == [0, 0, 0, 0, 0, 0, 0, 1, 0, 0]
assert candidate(9876543210) == [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
assert candidate(-100) == [2, 1, 0, 0, 0, 0, 0, 0, 0, 0]
assert candidate(55555) == [0, 0, 0, 0, 0, 5, 0, 0, 0, 0]
''', imports="from typing import List")

_p("commonest_letter", '''
def commonest_letter(text: str) -> str:
    """Return the letter that occurs most often in the text, counting case-insensitively and
    ignoring everything that is not an ASCII letter. The answer is lower case; ties go to the
    alphabetically first letter; a text without letters gives "".
    >>> commonest_letter("Hello World")
    'l'
    >>> commonest_letter("abBA")
    'a'
    """
''', '''
def aux(text):
    counts = {}
    for ch in text.lower():
        if "a" <= ch <= "z":
            counts[ch] = counts.get(ch, 0) + 1
    return counts
''', '''
def commonest_letter(text):
    best = ""
    best_count = 0
    for letter, count in sorted(aux(text).items()):
        if count > best_count:
            best, best_count = letter, count
    return best
''', '''
assert candidate("Hello World") == "l"
assert candidate("abBA") == "a"
assert candidate("") == ""
assert candidate("1234 !?") == ""
assert candidate("zZy") == "z"
assert candidate("yz") == "y"
assert candidate("Mississippi") == "i"
assert candidate("ééa") == "a"
''')

_p("palindromic_substrings", '''
def palindromic_substrings(text: str) -> int:
    """Count the non-empty substrings of the text (by position, so equal substrings at different
    positions count separately) that read the same forwards and backwards.
    >>> palindromic_substrings("aaa")
    6
    >>> palindromic_substrings("abc")
    3
    """
''', '''
def aux(text, left, right):
    count = 0
    while left >= 0 and right < len(text) and text[left] == text[right]:
        count += 1
        left -= 1
        right += 1
    return count
''', '''
def palindromic_substrings(text):
    total = 0
    for center in range(len(text)):
        total += aux(text, center, center)
        total += aux(text, center, center + 1)
    return total
''', '''
assert candidate("aaa") == 6
assert candidate("abc") == 3
assert candidate("") == 0
assert candidate("a") == 1
assert candidate("abba") == 6
assert candidate("aba") == 4
assert candidate("abab") == 6
''')

_p("commonest_pair_sum", '''
def commonest_pair_sum(values: List[int]) -> Optional[int]:
    """Over all pairs of positions i < j, return the value of values[i] + values[j] that occurs for
    the largest number of pairs; on a tie return the smallest such sum. With fewer than two values
    return None.
    >>> commonest_pair_sum([1, 2, 3, 4])
    5
    >>> commonest_pair_sum([3, 1])
    4
    """
''', '''
def aux(values):
    sums = []
    for i in range(len(values)):
        for j in range(i + 1, len(values)):
            sums.append(values[i] + values[j])
    return sums
''', '''
def commonest_pair_sum(values):
    counts = {}
    for s in aux(values):
        counts[s] = counts.get(s, 0) + 1
    best = None
    for s, c in counts.items():
        if best is None or c > counts[best] or (c == counts[best] and s < best):
            best = s
    return best
''', '''
assert candidate([1, 2, 3, 4]) == 5
assert candidate([3, 1]) == 4
assert candidate([]) is None
assert candidate([4]) is None
assert candidate([5, 5, 5]) == 10
assert candidate([1, 2, 3]) == 3
assert candidate([3, 2, 1]) == 3
assert candidate([0, 10, -10, 20]) == 10
''', imports="from typing import List, Optional")

_p("divisible_pair_count", '''
def divisible_pair_count(values: List[int], k: int) -> int:
    """Count the pairs of positions i < j whose sum values[i] + values[j] is divisible by k (k >= 1).
    >>> divisible_pair_count([1, 2, 3, 4, 5], 3)
    4
    >>> divisible_pair_count([2, 4], 5)
    0
    """
''', '''
def aux(values, k):
    buckets = [0] * k
    for v in values:
        buckets[v % k] += 1
    return buckets
''', '''
def divisible_pair_count(values, k):
    buckets = aux(values, k)
    pairs = buckets[0] * (buckets[0] - 1) // 2
    for r in range(1, k // 2 + 1):
        if r == k - r:
            pairs += buckets[r] * (buckets[r] - 1) // 2
        else:
            pairs += buckets[r] * buckets[k - r]
    return pairs
''', '''
assert candidate([1, 2, 3, 4, 5], 3) == 4
assert candidate([2, 4], 5) == 0
assert candidate([], 4) == 0
assert candidate([1, 1, 1], 1) == 3
assert candidate([2, 2, 2, 6], 4) == 6
assert candidate([1, 3, 5, 7], 4) == 4
assert candidate([-1, 1, 4], 2) == 1
assert candidate([0, 5, 10, 3], 5) == 3
''', imports="from typing import List")

# ----------------------------------------------------------------------------------------------------------------
# Primes and number theory
# ----------------------------------------------------------------------------------------------------------------

_p("widest_prime_gap", '''
def widest_prime_gap(low: int, high: int) -> int:
    """Return the largest difference between two consecutive primes that both lie in the range
    low..high (inclusive), or 0 if the range holds fewer than two primes.
    >>> widest_prime_gap(10, 30)
    6
    >>> widest_prime_gap(14, 16)
    0
    """
''', '''
def aux(limit):
    if limit < 2:
        return [False] * (max(limit, 0) + 1)
    flags = [True] * (limit + 1)
    flags[0] = flags[1] = False
    for p in range(2, int(limit ** 0.5) + 1):
        if flags[p]:
            for q in range(p * p, limit + 1, p):
                flags[q] = False
    return flags
''', '''
def widest_prime_gap(low, high):
    flags = aux(high)
    primes = [n for n in range(max(low, 0), high + 1) if flags[n]]
    gap = 0
    for a, b in zip(primes, primes[1:]):
        gap = max(gap, b - a)
    return gap
''', '''
assert candidate(10, 30) == 6
assert candidate(14, 16) == 0
assert candidate(0, 1) == 0
assert candidate(2, 3) == 1
assert candidate(2, 2) == 0
assert candidate(1, 20) == 4
assert candidate(89, 97) == 8
assert candidate(90, 97) == 0
''')

_p("twin_primes", '''
def twin_primes(limit: int) -> List[Tuple[int, int]]:
    """Return all pairs (p, p + 2) where both p and p + 2 are prime and p + 2 <= limit, by increasing p.
    >>> twin_primes(20)
    [(3, 5), (5, 7), (11, 13), (17, 19)]
    >>> twin_primes(4)
    []
    """
''', '''
def aux(n):
    if n < 2:
        return False
    d = 2
    while d * d <= n:
        if n % d == 0:
            return False
        d += 1
    return True
''', '''
def twin_primes(limit):
    pairs = []
    for p in range(2, limit - 1):
        if aux(p) and aux(p + 2):
            pairs.append((p, p + 2))
    return pairs
''', '''
assert candidate(20) == [(3, 5), (5, 7), (11, 13), (17, 19)]
assert candidate(4) == []
assert candidate(5) == [(3, 5)]
assert candidate(7) == [(3, 5), (5, 7)]
assert candidate(0) == []
assert candidate(18) == [(3, 5), (5, 7), (11, 13)]
assert candidate(43) == [(3, 5), (5, 7), (11, 13), (17, 19), (29, 31), (41, 43)]
''', imports="from typing import List, Tuple")

_p("goldbach_split", '''
def goldbach_split(n: int) -> Tuple[int, int]:
    """For an even n >= 4 return the pair of primes (p, q) with p + q == n, p <= q and p as small as
    possible. For any other n return (0, 0).
    >>> goldbach_split(28)
    (5, 23)
    >>> goldbach_split(9)
    (0, 0)
    """
''', '''
def aux(n):
    if n < 2:
        return False
    for d in range(2, int(n ** 0.5) + 1):
        if n % d == 0:
            return False
    return True
''', '''
def goldbach_split(n):
    if n < 4 or n % 2 != 0:
        return (0, 0)
    for p in range(2, n // 2 + 1):
        if aux(p) and aux(n - p):
            return (p, n - p)
    return (0, 0)
''', '''
assert candidate(28) == (5, 23)
assert candidate(9) == (0, 0)
assert candidate(4) == (2, 2)
assert candidate(2) == (0, 0)
assert candidate(0) == (0, 0)
assert candidate(6) == (3, 3)
assert candidate(100) == (3, 97)
assert candidate(-8) == (0, 0)
''', imports="from typing import Tuple")

_p("factor_notation", '''
def factor_notation(n: int) -> str:
    """Write the prime factorisation of n >= 2 as factors in increasing order joined by " * ",
    a repeated factor written once with its exponent as "p^e". For n < 2 return "".
    >>> factor_notation(360)
    '2^3 * 3^2 * 5'
    >>> factor_notation(13)
    '13'
    """
''', '''
def aux(n):
    factors = []
    d = 2
    while d * d <= n:
        while n % d == 0:
            factors.append(d)
            n //= d
        d += 1
    if n > 1:
        factors.append(n)
    return factors
''', '''
def factor_notation(n):
    if n < 2:
        return ""
    parts = []
    factors = aux(n)
    for p in sorted(set(factors)):
        e = factors.count(p)
        parts.append(str(p) if e == 1 else f"{p}^{e}")
    return " * ".join(parts)
''', '''
assert candidate(360) == "2^3 * 3^2 * 5"
assert candidate(13) == "13"
assert candidate(1) == ""
assert candidate(0) == ""
assert candidate(2) == "2"
assert candidate(4) == "2^2"
assert candidate(1024) == "2^10"
assert candidate(3 * 7 * 7 * 11) == "3 * 7^2 * 11"
''')

_p("most_divisible", '''
def most_divisible(low: int, high: int) -> int:
    """Return the number in low..high (1 <= low <= high) that has the most positive divisors;
    on a tie return the smallest such number.
    >>> most_divisible(1, 10)
    6
    >>> most_divisible(13, 13)
    13
    """
''', '''
def aux(n):
    count = 0
    d = 1
    while d * d <= n:
        if n % d == 0:
            count += 1 if d * d == n else 2
        d += 1
    return count
''', '''
def most_divisible(low, high):
    best = low
    best_count = aux(low)
    for n in range(low + 1, high + 1):
        c = aux(n)
        if c > best_count:
            best, best_count = n, c
    return best
''', '''
assert candidate(1, 10) == 6
assert candidate(13, 13) == 13
assert candidate(1, 1) == 1
assert candidate(1, 3) == 2
assert candidate(7, 9) == 8
assert candidate(10, 20) == 12
assert candidate(25, 37) == 36
assert candidate(25, 35) == 30
assert candidate(1, 100) == 60
''')

_p("perfect_numbers", '''
def perfect_numbers(limit: int) -> List[int]:
    """Return the perfect numbers up to `limit` inclusive (numbers equal to the sum of their
    positive divisors other than themselves), in increasing order.
    >>> perfect_numbers(30)
    [6, 28]
    >>> perfect_numbers(5)
    []
    """
''', '''
def aux(n):
    if n < 2:
        return 0
    total = 1
    d = 2
    while d * d <= n:
        if n % d == 0:
            total += d
            if d * d != n:
                total += n // d
        d += 1
    return total
''', '''
def perfect_numbers(limit):
    found = []
    for n in range(2, limit + 1):
        if aux(n) == n:
            found.append(n)
    return found
''', '''
assert candidate(30) == [6, 28]
assert candidate(5) == []
assert candidate(6) == [6]
assert candidate(27) == [6]
assert candidate(28) == [6, 28]
assert candidate(1) == []
assert candidate(500) == [6, 28, 496]
''', imports="from typing import List")

_p("least_common_multiple", '''
def least_common_multiple(values: List[int]) -> int:
    """Return the least common multiple of a list of positive integers; an empty list gives 1.
    >>> least_common_multiple([4, 6])
    12
    >>> least_common_multiple([2, 3, 5, 7])
    210
    """
''', '''
def aux(a, b):
    while b:
        a, b = b, a % b
    return a
''', '''
def least_common_multiple(values):
    result = 1
    for v in values:
        result = result * v // aux(result, v)
    return result
''', '''
assert candidate([4, 6]) == 12
assert candidate([2, 3, 5, 7]) == 210
assert candidate([]) == 1
assert candidate([9]) == 9
assert candidate([3, 3]) == 3
assert candidate([8, 12, 18]) == 72
assert candidate([1, 1, 1]) == 1
assert candidate([10, 15, 4]) == 60
''', imports="from typing import List")

_p("reduce_ratio", '''
def reduce_ratio(fraction: str) -> str:
    """Reduce a fraction "a/b" of integers (b != 0, either may be negative) to lowest terms with a
    positive denominator. Write the result as "p/q", or just "p" when the denominator is 1.
    >>> reduce_ratio("6/8")
    '3/4'
    >>> reduce_ratio("10/-5")
    '-2'
    """
''', '''
def aux(a, b):
    a, b = abs(a), abs(b)
    while b:
        a, b = b, a % b
    return a
''', '''
def reduce_ratio(fraction):
    top, bottom = (int(x) for x in fraction.split("/"))
    if bottom < 0:
        top, bottom = -top, -bottom
    g = aux(top, bottom)
    top //= g
    bottom //= g
    if bottom == 1:
        return str(top)
    return f"{top}/{bottom}"
''', '''
assert candidate("6/8") == "3/4"
assert candidate("10/-5") == "-2"
assert candidate("0/7") == "0"
assert candidate("3/1") == "3"
assert candidate("-4/6") == "-2/3"
assert candidate("-4/-6") == "2/3"
assert candidate("7/13") == "7/13"
assert candidate("100/25") == "4"
''')

_p("product_persistence", '''
def product_persistence(n: int) -> int:
    """Count how many times the non-negative number n must be replaced by the product of its decimal
    digits until it has a single digit.
    >>> product_persistence(39)
    3
    >>> product_persistence(7)
    0
    """
''', '''
def aux(n):
    product = 1
    for ch in str(n):
        product *= int(ch)
    return product
''', '''
def product_persistence(n):
    steps = 0
    while n >= 10:
        n = aux(n)
        steps += 1
    return steps
''', '''
assert candidate(39) == 3
assert candidate(7) == 0
assert candidate(0) == 0
assert candidate(10) == 1
assert candidate(25) == 2
assert candidate(999) == 4
assert candidate(277777788888899) == 11
''')

_p("happy_steps", '''
def happy_steps(n: int) -> int:
    """Starting from a positive number n, repeatedly replace it by the sum of the squares of its
    decimal digits. Return the number of replacements needed to reach 1, or -1 if the sequence
    never reaches 1 (it falls into a cycle).
    >>> happy_steps(19)
    4
    >>> happy_steps(4)
    -1
    """
''', '''
def aux(n):
    total = 0
    while n > 0:
        n, d = divmod(n, 10)
        total += d * d
    return total
''', '''
def happy_steps(n):
    seen = set()
    steps = 0
    while n != 1:
        if n in seen:
            return -1
        seen.add(n)
        n = aux(n)
        steps += 1
    return steps
''', '''
assert candidate(19) == 4
assert candidate(4) == -1
assert candidate(1) == 0
assert candidate(10) == 1
assert candidate(7) == 5
assert candidate(2) == -1
assert candidate(100) == 1
assert candidate(13) == 2
''')

_p("in_base", '''
def in_base(n: int, base: int) -> str:
    """Write the integer n in the given base (2 <= base <= 36) using the digits 0-9 then upper-case
    A-Z, with a leading '-' for negative numbers. Zero is "0".
    >>> in_base(255, 16)
    'FF'
    >>> in_base(-5, 2)
    '-101'
    """
''', '''
def aux(n, base):
    digits = []
    while n > 0:
        n, d = divmod(n, base)
        digits.append(d)
    return digits[::-1]
''', '''
def in_base(n, base):
    if n == 0:
        return "0"
    symbols = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    text = "".join(symbols[d] for d in aux(abs(n), base))
    if n < 0:
        text = "-" + text
    return text
''', '''
assert candidate(255, 16) == "FF"
assert candidate(-5, 2) == "-101"
assert candidate(0, 7) == "0"
assert candidate(35, 36) == "Z"
assert candidate(36, 36) == "10"
assert candidate(8, 8) == "10"
assert candidate(1, 2) == "1"
assert candidate(-100, 10) == "-100"
''')

_p("longest_collatz_start", '''
def longest_collatz_start(limit: int) -> int:
    """Among the starting values 1..limit (limit >= 1), return the one whose Collatz sequence
    (n -> n / 2 if n is even, else 3n + 1, until reaching 1) takes the most steps; on a tie the
    smallest start wins.
    >>> longest_collatz_start(10)
    9
    >>> longest_collatz_start(1)
    1
    """
''', '''
def aux(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps
''', '''
def longest_collatz_start(limit):
    best, best_steps = 1, 0
    for start in range(2, limit + 1):
        s = aux(start)
        if s > best_steps:
            best, best_steps = start, s
    return best
''', '''
assert candidate(10) == 9
assert candidate(1) == 1
assert candidate(2) == 2
assert candidate(3) == 3
assert candidate(6) == 6
assert candidate(8) == 7
assert candidate(100) == 97
''')

_p("coprime_total", '''
def coprime_total(n: int) -> int:
    """Return how many integers k with 1 <= k <= n have no common divisor with n other than 1.
    n is at least 1.
    >>> coprime_total(9)
    6
    >>> coprime_total(1)
    1
    """
''', '''
def aux(a, b):
    while b:
        a, b = b, a % b
    return a
''', '''
def coprime_total(n):
    count = 0
    for k in range(1, n + 1):
        if aux(k, n) == 1:
            count += 1
    return count
''', '''
assert candidate(9) == 6
assert candidate(1) == 1
assert candidate(2) == 1
assert candidate(7) == 6
assert candidate(10) == 4
assert candidate(12) == 4
assert candidate(36) == 12
''')

# ----------------------------------------------------------------------------------------------------------------
# Parsing small formats
# ----------------------------------------------------------------------------------------------------------------

_p("expand_ranges", '''
def expand_ranges(spec: str) -> List[int]:
    """Expand a comma-separated list of items, each a number "n" or an inclusive range "a-b" of
    non-negative integers, into the sorted list of the numbers it names, each once. A range with
    a > b names nothing. Spaces are ignored; an empty spec names nothing.
    >>> expand_ranges("1-3,5,7-8")
    [1, 2, 3, 5, 7, 8]
    >>> expand_ranges("4, 2-4")
    [2, 3, 4]
    """
''', '''
def aux(item):
    if "-" in item:
        low, high = item.split("-")
        return int(low), int(high)
    return int(item), int(item)
''', '''
def expand_ranges(spec):
    numbers = set()
    for item in spec.replace(" ", "").split(","):
        if not item:
            continue
        low, high = aux(item)
        numbers.update(range(low, high + 1))
    return sorted(numbers)
''', '''
assert candidate("1-3,5,7-8") == [1, 2, 3, 5, 7, 8]
assert candidate("4, 2-4") == [2, 3, 4]
assert candidate("") == []
assert candidate("0") == [0]
assert candidate("5-5") == [5]
assert candidate("9-7") == []
assert candidate("10-12,1") == [1, 10, 11, 12]
''', imports="from typing import List")

_p("collapse_ranges", '''
def collapse_ranges(numbers: List[int]) -> str:
    """Describe a list of integers (any order, repeats allowed) as a comma-separated list of
    maximal runs of consecutive values in ascending order: a run of one value is written "n", a
    longer run "a-b". An empty list gives "".
    >>> collapse_ranges([1, 2, 3, 5, 7, 8])
    '1-3,5,7-8'
    >>> collapse_ranges([4, 2, 3, 3])
    '2-4'
    """
''', '''
def aux(numbers):
    runs = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return runs
''', '''
def collapse_ranges(numbers):
    parts = []
    for low, high in aux(numbers):
        if low == high:
            parts.append(str(low))
        else:
            parts.append(f"{low}-{high}")
    return ",".join(parts)
''', '''
assert candidate([1, 2, 3, 5, 7, 8]) == "1-3,5,7-8"
assert candidate([4, 2, 3, 3]) == "2-4"
assert candidate([]) == ""
assert candidate([6]) == "6"
assert candidate([1, 3, 5]) == "1,3,5"
assert candidate([10, 11]) == "10-11"
assert candidate([0, 1, 2, 4, 5, 9]) == "0-2,4-5,9"
''', imports="from typing import List")

_p("postfix_value", '''
def postfix_value(expression: str) -> int:
    """Evaluate an expression in postfix (reverse Polish) notation: tokens separated by spaces are
    integers (possibly negative) or the operators + - * /, where / divides and truncates toward zero.
    The expression is well formed.
    >>> postfix_value("3 4 + 2 *")
    14
    >>> postfix_value("7 -2 /")
    -3
    """
''', '''
def aux(op, a, b):
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q
''', '''
def postfix_value(expression):
    stack = []
    for token in expression.split():
        if token in ("+", "-", "*", "/"):
            b = stack.pop()
            a = stack.pop()
            stack.append(aux(token, a, b))
        else:
            stack.append(int(token))
    return stack[-1]
''', '''
assert candidate("3 4 + 2 *") == 14
assert candidate("7 -2 /") == -3
assert candidate("5") == 5
assert candidate("10 3 -") == 7
assert candidate("3 10 -") == -7
assert candidate("7 2 /") == 3
assert candidate("-7 2 /") == -3
assert candidate("2 3 4 * +") == 14
assert candidate("1 2 - 3 -") == -4
''')

_p("sum_expression", '''
def sum_expression(expression: str) -> int:
    """Evaluate a string made of non-negative integers joined by '+' and '-' (with any spaces), from
    left to right. A leading '-' negates the first number. An empty or blank string is 0.
    >>> sum_expression("12 + 3 - 4")
    11
    >>> sum_expression("-5+2")
    -3
    """
''', '''
def aux(expression):
    tokens = []
    number = ""
    for ch in expression:
        if ch.isdigit():
            number += ch
        elif ch in "+-":
            if number:
                tokens.append(number)
                number = ""
            tokens.append(ch)
    if number:
        tokens.append(number)
    return tokens
''', '''
def sum_expression(expression):
    total = 0
    sign = 1
    for token in aux(expression):
        if token == "+":
            sign = 1
        elif token == "-":
            sign = -1
        else:
            total += sign * int(token)
    return total
''', '''
assert candidate("12 + 3 - 4") == 11
assert candidate("-5+2") == -3
assert candidate("") == 0
assert candidate("   ") == 0
assert candidate("42") == 42
assert candidate("1-2-3") == -4
assert candidate("100 - 1 + 10") == 109
''')

_p("duration_seconds", '''
def duration_seconds(text: str) -> int:
    """Convert a duration such as "1h30m15s" to seconds. The text is a sequence of parts, each a
    whole number followed by a unit: 'd' (day), 'h', 'm' or 's'; units may repeat and come in any
    order. An empty text is 0 seconds.
    >>> duration_seconds("1h30m15s")
    5415
    >>> duration_seconds("2d")
    172800
    """
''', '''
def aux(text):
    parts = []
    number = ""
    for ch in text:
        if ch.isdigit():
            number += ch
        else:
            parts.append((int(number), ch))
            number = ""
    return parts
''', '''
def duration_seconds(text):
    unit_seconds = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    total = 0
    for amount, unit in aux(text):
        total += amount * unit_seconds[unit]
    return total
''', '''
assert candidate("1h30m15s") == 5415
assert candidate("2d") == 172800
assert candidate("") == 0
assert candidate("45s") == 45
assert candidate("90m") == 5400
assert candidate("1m1m") == 120
assert candidate("10s1d") == 86410
assert candidate("0h") == 0
''')

_p("column_total", '''
def column_total(rows: List[str], column: str) -> int:
    """`rows` are the lines of a small comma-separated table whose first line is the header. Return
    the sum of the integer values in the named column; empty cells count as 0, and a row with fewer
    cells than the header is treated as if the missing cells were empty. A missing column gives 0.
    >>> column_total(["name,qty,price", "pen,3,2", "ink,,9", "pad,4,1"], "qty")
    7
    >>> column_total(["a,b", "1,2"], "c")
    0
    """
''', '''
def aux(rows):
    if not rows:
        return []
    header = rows[0].split(",")
    records = []
    for line in rows[1:]:
        cells = line.split(",")
        records.append({name: (cells[i] if i < len(cells) else "") for i, name in enumerate(header)})
    return records
''', '''
def column_total(rows, column):
    total = 0
    for record in aux(rows):
        cell = record.get(column, "").strip()
        if cell:
            total += int(cell)
    return total
''', '''
assert candidate(["name,qty,price", "pen,3,2", "ink,,9", "pad,4,1"], "qty") == 7
assert candidate(["name,qty,price", "pen,3,2", "ink,,9", "pad,4,1"], "price") == 12
assert candidate(["a,b", "1,2"], "c") == 0
assert candidate([], "a") == 0
assert candidate(["a,b"], "a") == 0
assert candidate(["a,b", "5", "6,7"], "b") == 7
assert candidate(["x", "-3", "10"], "x") == 7
''', imports="from typing import List")

_p("version_order", '''
def version_order(first: str, second: str) -> int:
    """Compare two version strings made of non-negative integers separated by dots, part by part
    numerically; missing trailing parts count as 0 (so "1.2" equals "1.2.0"). Return -1 if the
    first is older, 1 if it is newer and 0 if they are equal.
    >>> version_order("1.2.10", "1.2.9")
    1
    >>> version_order("1.0", "1")
    0
    """
''', '''
def aux(version, length):
    parts = [int(p) for p in version.split(".")]
    return parts + [0] * (length - len(parts))
''', '''
def version_order(first, second):
    length = max(first.count("."), second.count(".")) + 1
    a = aux(first, length)
    b = aux(second, length)
    if a < b:
        return -1
    if a > b:
        return 1
    return 0
''', '''
assert candidate("1.2.10", "1.2.9") == 1
assert candidate("1.0", "1") == 0
assert candidate("1.2", "1.10") == -1
assert candidate("2", "10") == -1
assert candidate("0.0.1", "0") == 1
assert candidate("3.4.5", "3.4.5") == 0
assert candidate("1.0.0.1", "1.0.1") == -1
''')

_p("ipv4_number", '''
def ipv4_number(address: str) -> int:
    """Convert a dotted IPv4 address "a.b.c.d" to its 32-bit number a*256**3 + b*256**2 + c*256 + d.
    Return -1 if the address is invalid: not exactly four parts, a part that is empty or not all
    decimal digits, or a part above 255.
    >>> ipv4_number("192.168.0.1")
    3232235521
    >>> ipv4_number("1.2.3")
    -1
    """
''', '''
def aux(address):
    parts = address.split(".")
    if len(parts) != 4:
        return None
    octets = []
    for part in parts:
        if not part.isdigit() or int(part) > 255:
            return None
        octets.append(int(part))
    return octets
''', '''
def ipv4_number(address):
    octets = aux(address)
    if octets is None:
        return -1
    value = 0
    for octet in octets:
        value = value * 256 + octet
    return value
''', '''
assert candidate("192.168.0.1") == 3232235521
assert candidate("1.2.3") == -1
assert candidate("0.0.0.0") == 0
assert candidate("255.255.255.255") == 4294967295
assert candidate("256.0.0.1") == -1
assert candidate("1..2.3") == -1
assert candidate("10.0.0.a") == -1
assert candidate("0.0.1.0") == 256
assert candidate("1.2.3.4.5") == -1
''')

# ----------------------------------------------------------------------------------------------------------------
# Intervals
# ----------------------------------------------------------------------------------------------------------------

_p("covered_length", '''
def covered_length(intervals: List[Tuple[int, int]]) -> int:
    """Each interval (start, end) with start <= end covers the points start <= x < end. Return the
    total length covered by the union of the intervals (overlaps are counted once).
    >>> covered_length([(1, 4), (2, 6), (8, 9)])
    6
    >>> covered_length([])
    0
    """
''', '''
def aux(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged
''', '''
def covered_length(intervals):
    total = 0
    for start, end in aux(intervals):
        total += end - start
    return total
''', '''
assert candidate([(1, 4), (2, 6), (8, 9)]) == 6
assert candidate([]) == 0
assert candidate([(3, 3)]) == 0
assert candidate([(0, 10), (2, 3)]) == 10
assert candidate([(5, 7), (1, 2)]) == 3
assert candidate([(1, 2), (2, 3)]) == 2
assert candidate([(-5, -1), (-3, 2)]) == 7
''', imports="from typing import List, Tuple")

_p("free_slots", '''
def free_slots(busy: List[Tuple[int, int]], start: int, end: int) -> List[Tuple[int, int]]:
    """Busy periods are (a, b) with a < b, possibly overlapping and unsorted. Return the free
    periods inside the window [start, end] as sorted (a, b) pairs with a < b: the maximal stretches
    of the window that no busy period covers. Touching busy periods leave no gap between them.
    >>> free_slots([(9, 10), (12, 13), (9, 11)], 8, 14)
    [(8, 9), (11, 12), (13, 14)]
    >>> free_slots([(0, 5)], 1, 4)
    []
    >>> free_slots([(2, 4), (6, 9)], 2, 6)
    [(4, 6)]
    """
''', '''
def aux(periods):
    merged = []
    for a, b in sorted(periods):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged
''', '''
def free_slots(busy, start, end):
    slots = []
    cursor = start
    for a, b in aux(busy):
        if a >= end:
            break
        if a > cursor:
            slots.append((cursor, a))
        cursor = max(cursor, b)
    if cursor < end:
        slots.append((cursor, end))
    return slots
''', '''
assert candidate([(9, 10), (12, 13), (9, 11)], 8, 14) == [(8, 9), (11, 12), (13, 14)]
assert candidate([(0, 5)], 1, 4) == []
assert candidate([], 2, 6) == [(2, 6)]
assert candidate([(1, 2), (2, 3)], 0, 4) == [(0, 1), (3, 4)]
assert candidate([(10, 20)], 0, 5) == [(0, 5)]
assert candidate([(3, 7)], 5, 10) == [(7, 10)]
assert candidate([(0, 1)], 5, 8) == [(5, 8)]
assert candidate([(2, 4), (6, 9)], 2, 6) == [(4, 6)]
assert candidate([(4, 6)], 0, 4) == [(0, 4)]
''', imports="from typing import List, Tuple")

_p("peak_overlap", '''
def peak_overlap(intervals: List[Tuple[int, int]]) -> int:
    """Each interval (start, end) with start < end occupies the half-open stretch start <= x < end.
    Return the largest number of intervals that occupy one common point (0 for no intervals).
    An interval ending where another starts does not overlap it.
    >>> peak_overlap([(1, 5), (2, 6), (4, 8), (6, 7)])
    3
    >>> peak_overlap([(1, 2), (2, 3)])
    1
    """
''', '''
def aux(intervals):
    events = []
    for start, end in intervals:
        events.append((start, 1))
        events.append((end, -1))
    return sorted(events)
''', '''
def peak_overlap(intervals):
    current = 0
    best = 0
    for _, change in aux(intervals):
        current += change
        if current > best:
            best = current
    return best
''', '''
assert candidate([(1, 5), (2, 6), (4, 8), (6, 7)]) == 3
assert candidate([(1, 2), (2, 3)]) == 1
assert candidate([]) == 0
assert candidate([(0, 10)]) == 1
assert candidate([(0, 10), (0, 10), (0, 10)]) == 3
assert candidate([(1, 3), (5, 7), (2, 6)]) == 2
assert candidate([(5, 6), (1, 2), (1, 9), (5, 9)]) == 3
''', imports="from typing import List, Tuple")

_p("common_intervals", '''
def common_intervals(first: List[Tuple[int, int]], second: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Each list holds closed intervals (a, b), a <= b, sorted and pairwise disjoint. Return the
    sorted list of the non-empty intersections of an interval of the first list with an interval of
    the second (a single shared point (x, x) counts).
    >>> common_intervals([(0, 2), (5, 10)], [(1, 5), (8, 12)])
    [(1, 2), (5, 5), (8, 10)]
    >>> common_intervals([(1, 3)], [])
    []
    """
''', '''
def aux(a, b):
    low = max(a[0], b[0])
    high = min(a[1], b[1])
    if low <= high:
        return (low, high)
    return None
''', '''
def common_intervals(first, second):
    result = []
    i = j = 0
    while i < len(first) and j < len(second):
        piece = aux(first[i], second[j])
        if piece is not None:
            result.append(piece)
        if first[i][1] < second[j][1]:
            i += 1
        else:
            j += 1
    return result
''', '''
assert candidate([(0, 2), (5, 10)], [(1, 5), (8, 12)]) == [(1, 2), (5, 5), (8, 10)]
assert candidate([(1, 3)], []) == []
assert candidate([(1, 10)], [(2, 3), (5, 6)]) == [(2, 3), (5, 6)]
assert candidate([(1, 2)], [(3, 4)]) == []
assert candidate([(0, 5)], [(0, 5)]) == [(0, 5)]
assert candidate([(1, 4), (6, 9)], [(4, 6)]) == [(4, 4), (6, 6)]
''', imports="from typing import List, Tuple")

_p("points_inside", '''
def points_inside(intervals: List[Tuple[int, int]], points: List[int]) -> int:
    """Count the points that lie inside at least one of the closed intervals (a, b) (a <= x <= b).
    A point listed twice counts twice.
    >>> points_inside([(1, 3), (10, 12)], [0, 2, 3, 11, 20])
    3
    >>> points_inside([], [1])
    0
    """
''', '''
def aux(intervals, x):
    for a, b in intervals:
        if a <= x <= b:
            return True
    return False
''', '''
def points_inside(intervals, points):
    count = 0
    for x in points:
        if aux(intervals, x):
            count += 1
    return count
''', '''
assert candidate([(1, 3), (10, 12)], [0, 2, 3, 11, 20]) == 3
assert candidate([], [1]) == 0
assert candidate([(1, 3)], []) == 0
assert candidate([(1, 3)], [1, 1, 3]) == 3
assert candidate([(5, 5)], [4, 5, 6]) == 1
assert candidate([(0, 4), (2, 8)], [3, 8, 9, -1]) == 2
''', imports="from typing import List, Tuple")

# ----------------------------------------------------------------------------------------------------------------
# Grids
# ----------------------------------------------------------------------------------------------------------------

_p("island_count", '''
def island_count(grid: List[str]) -> int:
    """The grid is a list of equal-length rows of '#' (land) and '.' (water). Count the islands:
    groups of land cells connected through their up, down, left and right neighbours.
    >>> island_count(["#..#", "#..#", "..#."])
    3
    >>> island_count([])
    0
    """
''', '''
def aux(grid, row, col):
    island = {(row, col)}
    stack = [(row, col)]
    while stack:
        r, c = stack.pop()
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < len(grid) and 0 <= nc < len(grid[nr]) and grid[nr][nc] == "#" and (nr, nc) not in island:
                island.add((nr, nc))
                stack.append((nr, nc))
    return island
''', '''
def island_count(grid):
    seen = set()
    islands = 0
    for r in range(len(grid)):
        for c in range(len(grid[r])):
            if grid[r][c] == "#" and (r, c) not in seen:
                seen |= aux(grid, r, c)
                islands += 1
    return islands
''', '''
assert candidate(["#..#", "#..#", "..#."]) == 3
assert candidate([]) == 0
assert candidate(["...", "..."]) == 0
assert candidate(["###", "#.#", "###"]) == 1
assert candidate(["#.#", ".#.", "#.#"]) == 5
assert candidate(["#"]) == 1
assert candidate(["##..", "....", "..##", "..#."]) == 2
''', imports="from typing import List")

_p("largest_island_area", '''
def largest_island_area(grid: List[str]) -> int:
    """The grid is a list of equal-length rows of '#' (land) and '.' (water). Return the number of
    cells of the largest island (land cells connected up, down, left or right), or 0 if there is
    no land.
    >>> largest_island_area(["##.", "#..", "..#"])
    3
    >>> largest_island_area(["..."])
    0
    """
''', '''
def aux(grid, seen, start):
    queue = [start]
    seen.add(start)
    area = 0
    while queue:
        r, c = queue.pop()
        area += 1
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < len(grid) and 0 <= nc < len(grid[0]) and grid[nr][nc] == "#" and (nr, nc) not in seen:
                seen.add((nr, nc))
                queue.append((nr, nc))
    return area
''', '''
def largest_island_area(grid):
    seen = set()
    best = 0
    for r, row in enumerate(grid):
        for c, cell in enumerate(row):
            if cell == "#" and (r, c) not in seen:
                best = max(best, aux(grid, seen, (r, c)))
    return best
''', '''
assert candidate(["##.", "#..", "..#"]) == 3
assert candidate(["..."]) == 0
assert candidate([]) == 0
assert candidate(["#"]) == 1
assert candidate(["#.#", ".#.", "#.#"]) == 1
assert candidate(["####", "...#", "##.#"]) == 6
assert candidate(["#.##", "#.##", "#..."]) == 4
''', imports="from typing import List")

_p("maze_steps", '''
def maze_steps(maze: List[str]) -> int:
    """The maze is a list of equal-length rows of '.' (open) and '#' (wall). Return the least number
    of moves (up, down, left, right, staying on open cells) from the top-left cell to the
    bottom-right cell, or -1 if either cell is a wall or there is no way through.
    >>> maze_steps(["..#", "#..", "#.."])
    4
    >>> maze_steps([".#", "#."])
    -1
    """
''', '''
def aux(maze, r, c):
    cells = []
    for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
        if 0 <= nr < len(maze) and 0 <= nc < len(maze[0]) and maze[nr][nc] == ".":
            cells.append((nr, nc))
    return cells
''', '''
def maze_steps(maze):
    rows, cols = len(maze), len(maze[0])
    if maze[0][0] != "." or maze[rows - 1][cols - 1] != ".":
        return -1
    dist = {(0, 0): 0}
    queue = [(0, 0)]
    head = 0
    while head < len(queue):
        cell = queue[head]
        head += 1
        if cell == (rows - 1, cols - 1):
            return dist[cell]
        for nxt in aux(maze, *cell):
            if nxt not in dist:
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    return -1
''', '''
assert candidate(["..#", "#..", "#.."]) == 4
assert candidate([".#", "#."]) == -1
assert candidate(["."]) == 0
assert candidate(["#"]) == -1
assert candidate(["...."]) == 3
assert candidate([".", ".", "."]) == 2
assert candidate(["..", ".#"]) == -1
assert candidate(["...", "##.", "...", ".##", "..."]) == 10
''', imports="from typing import List")

_p("turn_clockwise", '''
def turn_clockwise(matrix: List[List[int]]) -> List[List[int]]:
    """Return the matrix (a list of equal-length rows, possibly not square) rotated a quarter turn
    clockwise: the first column read from bottom to top becomes the first row. An empty matrix
    gives [].
    >>> turn_clockwise([[1, 2, 3], [4, 5, 6]])
    [[4, 1], [5, 2], [6, 3]]
    >>> turn_clockwise([[7]])
    [[7]]
    """
''', '''
def aux(matrix):
    if not matrix:
        return []
    return [[matrix[r][c] for r in range(len(matrix))] for c in range(len(matrix[0]))]
''', '''
def turn_clockwise(matrix):
    turned = []
    for row in aux(matrix):
        turned.append(row[::-1])
    return turned
''', '''
assert candidate([[1, 2, 3], [4, 5, 6]]) == [[4, 1], [5, 2], [6, 3]]
assert candidate([[7]]) == [[7]]
assert candidate([]) == []
assert candidate([[1, 2], [3, 4]]) == [[3, 1], [4, 2]]
assert candidate([[1], [2], [3]]) == [[3, 2, 1]]
assert candidate([[1, 2, 3]]) == [[1], [2], [3]]
''', imports="from typing import List")

_p("spiral_walk", '''
def spiral_walk(matrix: List[List[int]]) -> List[int]:
    """Return the elements of the matrix (equal-length rows) in clockwise spiral order, starting at
    the top-left corner and moving right first.
    >>> spiral_walk([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    [1, 2, 3, 6, 9, 8, 7, 4, 5]
    >>> spiral_walk([[1, 2], [3, 4], [5, 6]])
    [1, 2, 4, 6, 5, 3]
    """
''', '''
def aux(matrix, top, left, bottom, right):
    ring = [matrix[top][c] for c in range(left, right + 1)]
    ring += [matrix[r][right] for r in range(top + 1, bottom + 1)]
    if top < bottom:
        ring += [matrix[bottom][c] for c in range(right - 1, left - 1, -1)]
    if left < right:
        ring += [matrix[r][left] for r in range(bottom - 1, top, -1)]
    return ring
''', '''
def spiral_walk(matrix):
    if not matrix or not matrix[0]:
        return []
    top, left, bottom, right = 0, 0, len(matrix) - 1, len(matrix[0]) - 1
    order = []
    while top <= bottom and left <= right:
        order += aux(matrix, top, left, bottom, right)
        top, left, bottom, right = top + 1, left + 1, bottom - 1, right - 1
    return order
''', '''
assert candidate([[1, 2, 3], [4, 5, 6], [7, 8, 9]]) == [1, 2, 3, 6, 9, 8, 7, 4, 5]
assert candidate([[1, 2], [3, 4], [5, 6]]) == [1, 2, 4, 6, 5, 3]
assert candidate([]) == []
assert candidate([[5]]) == [5]
assert candidate([[1, 2, 3, 4]]) == [1, 2, 3, 4]
assert candidate([[1], [2], [3]]) == [1, 2, 3]
assert candidate([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]) == [1, 2, 3, 4, 8, 12, 11, 10, 9, 5, 6, 7]
''', imports="from typing import List")

_p("life_step", '''
def life_step(board: List[str]) -> List[str]:
    """Advance Conway's Game of Life one generation on a finite board of equal-length rows ('#' alive,
    '.' dead); cells outside the board are dead. A live cell with 2 or 3 live neighbours (of the 8
    around it) stays alive, a dead cell with exactly 3 comes alive, every other cell is dead.
    >>> life_step([".#.", ".#.", ".#."])
    ['...', '###', '...']
    >>> life_step(["##", "##"])
    ['##', '##']
    """
''', '''
def aux(board, r, c):
    count = 0
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            if (dr or dc) and 0 <= r + dr < len(board) and 0 <= c + dc < len(board[0]):
                count += board[r + dr][c + dc] == "#"
    return count
''', '''
def life_step(board):
    result = []
    for r in range(len(board)):
        row = ""
        for c in range(len(board[r])):
            n = aux(board, r, c)
            alive = board[r][c] == "#"
            row += "#" if n == 3 or (alive and n == 2) else "."
        result.append(row)
    return result
''', '''
assert candidate([".#.", ".#.", ".#."]) == ["...", "###", "..."]
assert candidate(["##", "##"]) == ["##", "##"]
assert candidate([]) == []
assert candidate(["#"]) == ["."]
assert candidate(["##.", "#..", "..."]) == ["##.", "##.", "..."]
assert candidate(["###", "###", "###"]) == ["#.#", "...", "#.#"]
assert candidate(["#.#", "...", "..."]) == ["...", "...", "..."]
''', imports="from typing import List")

_p("mine_hints", '''
def mine_hints(field: List[str]) -> List[str]:
    """The field is a list of equal-length rows of '*' (mine) and '.' (empty). Return the field with
    every empty cell replaced by the number of mines among its 8 neighbours, written as a digit,
    or left as '.' when that number is 0. Mines stay '*'.
    >>> mine_hints(["*..", "...", "..*"])
    ['*1.', '121', '.1*']
    >>> mine_hints(["..."])
    ['...']
    """
''', '''
def aux(field, r, c):
    total = 0
    for nr in range(r - 1, r + 2):
        for nc in range(c - 1, c + 2):
            if 0 <= nr < len(field) and 0 <= nc < len(field[nr]) and field[nr][nc] == "*":
                total += 1
    return total
''', '''
def mine_hints(field):
    out = []
    for r, row in enumerate(field):
        cells = []
        for c, ch in enumerate(row):
            if ch == "*":
                cells.append("*")
            else:
                n = aux(field, r, c)
                cells.append(str(n) if n > 0 else ".")
        out.append("".join(cells))
    return out
''', '''
assert candidate(["*..", "...", "..*"]) == ["*1.", "121", ".1*"]
assert candidate(["..."]) == ["..."]
assert candidate([]) == []
assert candidate(["*"]) == ["*"]
assert candidate(["*.*"]) == ["*2*"]
assert candidate(["***", "*.*", "***"]) == ["***", "*8*", "***"]
assert candidate([".", "*", "."]) == ["1", "*", "1"]
''', imports="from typing import List")

_p("cheapest_descent", '''
def cheapest_descent(costs: List[List[int]]) -> int:
    """Walk from the top-left to the bottom-right cell of a non-empty grid of costs, moving only right
    or down. Return the smallest possible sum of the costs of the cells visited (both ends included).
    >>> cheapest_descent([[1, 3, 1], [1, 5, 1], [4, 2, 1]])
    7
    >>> cheapest_descent([[5]])
    5
    """
''', '''
def aux(previous, row):
    current = []
    for c, cost in enumerate(row):
        options = [previous[c]]
        if c > 0:
            options.append(current[c - 1])
        current.append(cost + min(options))
    return current
''', '''
def cheapest_descent(costs):
    best = []
    total = 0
    for cost in costs[0]:
        total += cost
        best.append(total)
    for row in costs[1:]:
        best = aux(best, row)
    return best[-1]
''', '''
assert candidate([[1, 3, 1], [1, 5, 1], [4, 2, 1]]) == 7
assert candidate([[5]]) == 5
assert candidate([[1, 2, 3]]) == 6
assert candidate([[1], [2], [3]]) == 6
assert candidate([[1, 2], [1, 1]]) == 3
assert candidate([[0, 9, 9], [0, 0, 9], [9, 0, 0]]) == 0
assert candidate([[2, 1], [3, 4], [1, 1]]) == 7
''', imports="from typing import List")

# ----------------------------------------------------------------------------------------------------------------
# Dates without libraries
# ----------------------------------------------------------------------------------------------------------------

_p("ordinal_day", '''
def ordinal_day(date: str) -> int:
    """Return the day of the year (1 for January 1st) of a Gregorian date "YYYY-MM-DD". A year is a
    leap year when divisible by 4, except centuries, which must be divisible by 400.
    >>> ordinal_day("2024-03-01")
    61
    >>> ordinal_day("2023-12-31")
    365
    """
''', '''
def aux(year):
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
''', '''
def ordinal_day(date):
    year, month, day = (int(x) for x in date.split("-"))
    lengths = aux(year)
    return sum(lengths[:month - 1]) + day
''', '''
assert candidate("2024-03-01") == 61
assert candidate("2023-12-31") == 365
assert candidate("2024-12-31") == 366
assert candidate("2023-01-01") == 1
assert candidate("1900-03-01") == 60
assert candidate("2000-03-01") == 61
assert candidate("2021-02-28") == 59
assert candidate("2022-07-04") == 185
''')

_p("days_apart", '''
def days_apart(first: str, second: str) -> int:
    """Return the number of days between two Gregorian dates "YYYY-MM-DD" (a non-negative number,
    whichever date comes first). Leap years are divisible by 4, except centuries not divisible by 400.
    >>> days_apart("2024-02-28", "2024-03-01")
    2
    >>> days_apart("2001-01-01", "2000-01-01")
    366
    """
''', '''
def aux(date):
    year, month, day = (int(x) for x in date.split("-"))
    y = year - 1
    days = y * 365 + y // 4 - y // 100 + y // 400
    lengths = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
        lengths[1] = 29
    return days + sum(lengths[:month - 1]) + day
''', '''
def days_apart(first, second):
    a = aux(first)
    b = aux(second)
    if a > b:
        a, b = b, a
    return b - a
''', '''
assert candidate("2024-02-28", "2024-03-01") == 2
assert candidate("2001-01-01", "2000-01-01") == 366
assert candidate("2020-05-05", "2020-05-05") == 0
assert candidate("2023-02-28", "2023-03-01") == 1
assert candidate("1900-02-28", "1900-03-01") == 1
assert candidate("1999-12-31", "2000-01-01") == 1
assert candidate("1970-01-01", "2000-01-01") == 10957
assert candidate("2100-01-01", "2101-01-01") == 365
''')

_p("weekday_of", '''
def weekday_of(date: str) -> str:
    """Return the English name of the weekday ("Monday" ... "Sunday") of a Gregorian date
    "YYYY-MM-DD" (years 1 and later). For reference, 1970-01-01 was a Thursday.
    >>> weekday_of("1970-01-02")
    'Friday'
    >>> weekday_of("2000-02-29")
    'Tuesday'
    """
''', '''
def aux(date):
    year, month, day = (int(x) for x in date.split("-"))
    y = year - 1
    days = y * 365 + y // 4 - y // 100 + y // 400
    lengths = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
        lengths[1] = 29
    return days + sum(lengths[:month - 1]) + day
''', '''
def weekday_of(date):
    names = ["Thursday", "Friday", "Saturday", "Sunday", "Monday", "Tuesday", "Wednesday"]
    offset = (aux(date) - aux("1970-01-01")) % 7
    return names[offset]
''', '''
assert candidate("1970-01-02") == "Friday"
assert candidate("2000-02-29") == "Tuesday"
assert candidate("1970-01-01") == "Thursday"
assert candidate("1969-12-31") == "Wednesday"
assert candidate("2024-01-01") == "Monday"
assert candidate("1900-03-01") == "Thursday"
assert candidate("2023-12-31") == "Sunday"
assert candidate("2001-09-15") == "Saturday"
''')

_p("date_after", '''
def date_after(date: str, days: int) -> str:
    """Return the Gregorian date "YYYY-MM-DD" that comes `days` days (days >= 0) after the given
    date. Leap years are divisible by 4, except centuries not divisible by 400.
    >>> date_after("2024-02-28", 2)
    '2024-03-01'
    >>> date_after("1999-12-31", 1)
    '2000-01-01'
    """
''', '''
def aux(year, month):
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31
''', '''
def date_after(date, days):
    year, month, day = (int(x) for x in date.split("-"))
    day += days
    while day > aux(year, month):
        day -= aux(year, month)
        month += 1
        if month > 12:
            month = 1
            year += 1
    return f"{year:04d}-{month:02d}-{day:02d}"
''', '''
assert candidate("2024-02-28", 2) == "2024-03-01"
assert candidate("1999-12-31", 1) == "2000-01-01"
assert candidate("2023-05-17", 0) == "2023-05-17"
assert candidate("2023-02-28", 1) == "2023-03-01"
assert candidate("1900-02-28", 1) == "1900-03-01"
assert candidate("2023-01-31", 30) == "2023-03-02"
assert candidate("2023-01-01", 365) == "2024-01-01"
assert candidate("2024-01-01", 366) == "2025-01-01"
assert candidate("0999-12-30", 3) == "1000-01-02"
''')

_p("leap_year_count", '''
def leap_year_count(first: int, last: int) -> int:
    """Count the leap years from `first` to `last` inclusive (0 if first > last). A year is a leap
    year when divisible by 4, except centuries, which must be divisible by 400.
    >>> leap_year_count(1996, 2004)
    3
    >>> leap_year_count(1897, 1903)
    0
    """
''', '''
def aux(year):
    if year % 400 == 0:
        return True
    if year % 100 == 0:
        return False
    return year % 4 == 0
''', '''
def leap_year_count(first, last):
    count = 0
    for year in range(first, last + 1):
        if aux(year):
            count += 1
    return count
''', '''
assert candidate(1996, 2004) == 3
assert candidate(1897, 1903) == 0
assert candidate(2000, 2000) == 1
assert candidate(2001, 2000) == 0
assert candidate(2024, 2024) == 1
assert candidate(2023, 2023) == 0
assert candidate(1800, 2000) == 49
assert candidate(2001, 2099) == 24
''')

# ----------------------------------------------------------------------------------------------------------------
# Graphs
# ----------------------------------------------------------------------------------------------------------------

_p("hop_distance", '''
def hop_distance(edges: List[Tuple[str, str]], source: str, target: str) -> int:
    """The edges are undirected links between named nodes. Return the least number of links on a
    path from `source` to `target`, 0 when they are the same node, or -1 when there is no path.
    >>> hop_distance([("a", "b"), ("b", "c"), ("c", "d"), ("a", "c")], "a", "d")
    2
    >>> hop_distance([("a", "b")], "a", "z")
    -1
    """
''', '''
def aux(edges):
    graph = {}
    for u, v in edges:
        graph.setdefault(u, []).append(v)
        graph.setdefault(v, []).append(u)
    return graph
''', '''
def hop_distance(edges, source, target):
    if source == target:
        return 0
    graph = aux(edges)
    dist = {source: 0}
    frontier = [source]
    while frontier:
        nxt = []
        for node in frontier:
            for other in graph.get(node, []):
                if other not in dist:
                    dist[other] = dist[node] + 1
                    if other == target:
                        return dist[other]
                    nxt.append(other)
        frontier = nxt
    return -1
''', '''
assert candidate([("a", "b"), ("b", "c"), ("c", "d"), ("a", "c")], "a", "d") == 2
assert candidate([("a", "b")], "a", "z") == -1
assert candidate([], "x", "x") == 0
assert candidate([("a", "b")], "b", "a") == 1
assert candidate([("a", "b"), ("c", "d")], "a", "d") == -1
assert candidate([("1", "2"), ("2", "3"), ("3", "4"), ("4", "5")], "5", "1") == 4
assert candidate([("s", "t"), ("s", "u"), ("u", "t")], "u", "t") == 1
''', imports="from typing import List, Tuple")

_p("component_count", '''
def component_count(n: int, edges: List[Tuple[int, int]]) -> int:
    """A graph has the nodes 0..n-1 and the given undirected edges. Return the number of connected
    components (an isolated node is a component of its own).
    >>> component_count(5, [(0, 1), (1, 2), (3, 4)])
    2
    >>> component_count(3, [])
    3
    """
''', '''
def aux(n, edges):
    graph = [[] for _ in range(n)]
    for u, v in edges:
        graph[u].append(v)
        graph[v].append(u)
    return graph
''', '''
def component_count(n, edges):
    graph = aux(n, edges)
    seen = [False] * n
    components = 0
    for start in range(n):
        if seen[start]:
            continue
        components += 1
        seen[start] = True
        stack = [start]
        while stack:
            node = stack.pop()
            for other in graph[node]:
                if not seen[other]:
                    seen[other] = True
                    stack.append(other)
    return components
''', '''
assert candidate(5, [(0, 1), (1, 2), (3, 4)]) == 2
assert candidate(3, []) == 3
assert candidate(0, []) == 0
assert candidate(1, [(0, 0)]) == 1
assert candidate(4, [(0, 1), (1, 2), (2, 3), (3, 0)]) == 1
assert candidate(6, [(0, 5), (1, 4)]) == 4
assert candidate(4, [(2, 3), (3, 2)]) == 3
''', imports="from typing import List, Tuple")

_p("build_order", '''
def build_order(needs: Dict[str, List[str]]) -> List[str]:
    """`needs` maps each task to the tasks that must be done before it; every task mentioned anywhere
    is a task. Return an order doing every task after all the tasks it needs, choosing the
    alphabetically smallest available task at each step. If the needs form a cycle return [].
    >>> build_order({"b": ["a"], "c": ["a", "b"]})
    ['a', 'b', 'c']
    >>> build_order({"x": ["y"], "y": ["x"]})
    []
    """
''', '''
def aux(needs):
    missing = {}
    for task, before in needs.items():
        missing.setdefault(task, 0)
        for b in before:
            missing.setdefault(b, 0)
        missing[task] += len(set(before))
    return missing
''', '''
def build_order(needs):
    missing = aux(needs)
    order = []
    ready = sorted(t for t, n in missing.items() if n == 0)
    while ready:
        task = ready.pop(0)
        order.append(task)
        for other, before in needs.items():
            if task in before:
                missing[other] -= 1
                if missing[other] == 0:
                    ready.append(other)
        ready.sort()
    if len(order) < len(missing):
        return []
    return order
''', '''
assert candidate({"b": ["a"], "c": ["a", "b"]}) == ["a", "b", "c"]
assert candidate({"x": ["y"], "y": ["x"]}) == []
assert candidate({}) == []
assert candidate({"solo": []}) == ["solo"]
assert candidate({"a": ["z"], "b": []}) == ["b", "z", "a"]
assert candidate({"d": ["b", "c"], "b": ["a"], "c": ["a"]}) == ["a", "b", "c", "d"]
assert candidate({"a": [], "b": ["c"], "c": ["d"], "d": ["b"]}) == []
assert candidate({"m": ["k", "k"]}) == ["k", "m"]
''', imports="from typing import Dict, List")

_p("two_colorable", '''
def two_colorable(n: int, edges: List[Tuple[int, int]]) -> bool:
    """A graph has the nodes 0..n-1 and the given undirected edges. Return True if its nodes can be
    coloured with two colours so that every edge joins nodes of different colours. A self-loop
    makes that impossible.
    >>> two_colorable(4, [(0, 1), (1, 2), (2, 3), (3, 0)])
    True
    >>> two_colorable(3, [(0, 1), (1, 2), (2, 0)])
    False
    """
''', '''
def aux(n, edges):
    graph = {node: [] for node in range(n)}
    for u, v in edges:
        graph[u].append(v)
        graph[v].append(u)
    return graph
''', '''
def two_colorable(n, edges):
    graph = aux(n, edges)
    colour = {}
    for start in range(n):
        if start in colour:
            continue
        colour[start] = 0
        queue = [start]
        while queue:
            node = queue.pop()
            for other in graph[node]:
                if other not in colour:
                    colour[other] = 1 - colour[node]
                    queue.append(other)
                elif colour[other] == colour[node]:
                    return False
    return True
''', '''
assert candidate(4, [(0, 1), (1, 2), (2, 3), (3, 0)]) == True
assert candidate(3, [(0, 1), (1, 2), (2, 0)]) == False
assert candidate(0, []) == True
assert candidate(2, []) == True
assert candidate(1, [(0, 0)]) == False
assert candidate(6, [(0, 1), (2, 3), (3, 4), (4, 2)]) == False
assert candidate(5, [(0, 1), (0, 2), (0, 3), (0, 4)]) == True
''', imports="from typing import List, Tuple")

_p("shared_reach", '''
def shared_reach(graph: Dict[str, List[str]], first: str, second: str) -> List[str]:
    """`graph` maps a node to the nodes its directed links lead to (a node may be missing as a key,
    meaning it has no links). A node reaches itself and everything reachable by following links.
    Return, sorted, the nodes reached from both `first` and `second`.
    >>> shared_reach({"a": ["c"], "b": ["c"], "c": ["d"]}, "a", "b")
    ['c', 'd']
    >>> shared_reach({"a": ["b"]}, "a", "b")
    ['b']
    """
''', '''
def aux(graph, start):
    seen = {start}
    stack = [start]
    while stack:
        node = stack.pop()
        for other in graph.get(node, []):
            if other not in seen:
                seen.add(other)
                stack.append(other)
    return seen
''', '''
def shared_reach(graph, first, second):
    from_first = aux(graph, first)
    both = [node for node in aux(graph, second) if node in from_first]
    return sorted(both)
''', '''
assert candidate({"a": ["c"], "b": ["c"], "c": ["d"]}, "a", "b") == ["c", "d"]
assert candidate({"a": ["b"]}, "a", "b") == ["b"]
assert candidate({}, "x", "x") == ["x"]
assert candidate({}, "x", "y") == []
assert candidate({"a": ["b"], "b": ["a"]}, "a", "b") == ["a", "b"]
assert candidate({"p": ["q"], "r": ["s"]}, "p", "r") == []
assert candidate({"a": ["b", "c"], "c": ["e"], "d": ["c"]}, "a", "d") == ["c", "e"]
''', imports="from typing import Dict, List")

# ----------------------------------------------------------------------------------------------------------------
# Stacks and simulations
# ----------------------------------------------------------------------------------------------------------------

_p("collapse_polymer", '''
def collapse_polymer(chain: str) -> str:
    """A chain of letters reacts whenever two adjacent letters are the same letter in opposite cases
    ("aA" or "Aa"): both disappear, which may bring new letters together. Return the chain left
    when no more reactions are possible.
    >>> collapse_polymer("dabAcCaCBAcCcaDA")
    'dabCBAcaDA'
    >>> collapse_polymer("abBA")
    ''
    """
''', '''
def aux(a, b):
    return a != b and a.lower() == b.lower()
''', '''
def collapse_polymer(chain):
    stack = []
    for ch in chain:
        if stack and aux(stack[-1], ch):
            stack.pop()
        else:
            stack.append(ch)
    return "".join(stack)
''', '''
assert candidate("dabAcCaCBAcCcaDA") == "dabCBAcaDA"
assert candidate("abBA") == ""
assert candidate("") == ""
assert candidate("aa") == "aa"
assert candidate("aA") == ""
assert candidate("abAB") == "abAB"
assert candidate("xXy") == "y"
''')

_p("tidy_path", '''
def tidy_path(path: str) -> str:
    """Simplify an absolute Unix-style path: repeated slashes act as one, "." parts are dropped, and
    ".." removes the previous directory (at the root it does nothing). The result starts with "/",
    has no trailing slash unless it is the root "/" itself.
    >>> tidy_path("/home//user/./docs/../pics/")
    '/home/user/pics'
    >>> tidy_path("/../..")
    '/'
    """
''', '''
def aux(path):
    return [part for part in path.split("/") if part and part != "."]
''', '''
def tidy_path(path):
    stack = []
    for part in aux(path):
        if part == "..":
            if stack:
                stack.pop()
        else:
            stack.append(part)
    return "/" + "/".join(stack)
''', '''
assert candidate("/home//user/./docs/../pics/") == "/home/user/pics"
assert candidate("/../..") == "/"
assert candidate("/") == "/"
assert candidate("/a/b/c/../../d") == "/a/d"
assert candidate("/a/./b/.") == "/a/b"
assert candidate("/...") == "/..."
assert candidate("/x/../../y") == "/y"
''')

_p("rover_position", '''
def rover_position(commands: str) -> Tuple[int, int]:
    """A rover starts at (0, 0) facing north (the direction of increasing y). The commands are
    separated by spaces: "L" and "R" turn it 90 degrees left or right in place, and "F" followed by
    a number moves it that many cells forward. Return its final (x, y).
    >>> rover_position("F2 R F3")
    (3, 2)
    >>> rover_position("L L F1")
    (0, -1)
    """
''', '''
def aux(commands):
    steps = []
    for token in commands.split():
        if token[0] == "F":
            steps.append(("F", int(token[1:])))
        else:
            steps.append((token, 0))
    return steps
''', '''
def rover_position(commands):
    dx, dy = 0, 1
    x = y = 0
    for kind, amount in aux(commands):
        if kind == "L":
            dx, dy = -dy, dx
        elif kind == "R":
            dx, dy = dy, -dx
        else:
            x += dx * amount
            y += dy * amount
    return (x, y)
''', '''
assert candidate("F2 R F3") == (3, 2)
assert candidate("L L F1") == (0, -1)
assert candidate("") == (0, 0)
assert candidate("L F4") == (-4, 0)
assert candidate("R R R F2") == (-2, 0)
assert candidate("F10 L L F3") == (0, 7)
assert candidate("R F1 L F1 R F1") == (2, 1)
''', imports="from typing import Tuple")

_p("ledger_balance", '''
def ledger_balance(operations: List[str]) -> Tuple[int, int]:
    """Apply operations to an account starting at 0. Each operation is "deposit N" or "withdraw N"
    (N a non-negative integer); a withdrawal larger than the current balance is refused and changes
    nothing. Return (final balance, number of refused withdrawals).
    >>> ledger_balance(["deposit 50", "withdraw 20", "withdraw 40"])
    (30, 1)
    >>> ledger_balance([])
    (0, 0)
    """
''', '''
def aux(operation):
    kind, amount = operation.split()
    return kind, int(amount)
''', '''
def ledger_balance(operations):
    balance = 0
    refused = 0
    for op in operations:
        kind, amount = aux(op)
        if kind == "deposit":
            balance += amount
        elif amount > balance:
            refused += 1
        else:
            balance -= amount
    return (balance, refused)
''', '''
assert candidate(["deposit 50", "withdraw 20", "withdraw 40"]) == (30, 1)
assert candidate([]) == (0, 0)
assert candidate(["withdraw 1"]) == (0, 1)
assert candidate(["deposit 10", "withdraw 10"]) == (0, 0)
assert candidate(["deposit 5", "withdraw 6", "deposit 1", "withdraw 6"]) == (0, 1)
assert candidate(["deposit 0", "withdraw 0"]) == (0, 0)
assert candidate(["deposit 7", "deposit 8", "withdraw 3"]) == (12, 0)
''', imports="from typing import List, Tuple")

_p("last_standing", '''
def last_standing(n: int, k: int) -> int:
    """People numbered 1..n stand in a circle. Counting starts at person 1; every k-th person still
    in the circle leaves, and counting continues with the next person. Return the number of the
    last person left (n >= 1, k >= 1).
    >>> last_standing(5, 2)
    3
    >>> last_standing(7, 3)
    4
    """
''', '''
def aux(size, index, k):
    return (index + k - 1) % size
''', '''
def last_standing(n, k):
    people = list(range(1, n + 1))
    index = 0
    while len(people) > 1:
        index = aux(len(people), index, k)
        people.pop(index)
    return people[0]
''', '''
assert candidate(5, 2) == 3
assert candidate(7, 3) == 4
assert candidate(1, 1) == 1
assert candidate(1, 5) == 1
assert candidate(4, 1) == 4
assert candidate(6, 5) == 1
assert candidate(10, 2) == 5
assert candidate(2, 2) == 1
''')

_p("bounce_travel", '''
def bounce_travel(height: float, ratio: float, minimum: float) -> float:
    """A ball is dropped from `height`. After each landing it rises to `ratio` times the height of its
    previous fall (0 <= ratio < 1), then falls again; it stops as soon as the next rise would be lower
    than `minimum` (minimum > 0). Return the total vertical distance the ball travels.
    >>> bounce_travel(10.0, 0.5, 2.0)
    25.0
    >>> bounce_travel(3.0, 0.1, 1.0)
    3.0
    """
''', '''
def aux(height, ratio, minimum):
    rises = []
    h = height * ratio
    while h >= minimum:
        rises.append(h)
        h *= ratio
    return rises
''', '''
def bounce_travel(height, ratio, minimum):
    total = height
    for rise in aux(height, ratio, minimum):
        total += 2 * rise
    return total
''', '''
assert abs(candidate(10.0, 0.5, 2.0) - 25.0) < 1e-6
assert abs(candidate(3.0, 0.1, 1.0) - 3.0) < 1e-6
assert abs(candidate(10.0, 0.5, 2.5) - 25.0) < 1e-6
assert abs(candidate(10.0, 0.5, 3.0) - 20.0) < 1e-6
assert abs(candidate(5.0, 0.0, 0.1) - 5.0) < 1e-6
assert abs(candidate(8.0, 0.5, 1.0) - 22.0) < 1e-6
assert abs(candidate(1.0, 0.9, 0.8) - 4.42) < 1e-6
assert abs(candidate(100.0, 0.25, 1.0) - 165.625) < 1e-6
''')


if __name__ == "__main__":
    main()
