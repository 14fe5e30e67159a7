"""What of a text the entity model reads, and which of its finds are names.

The small spaCy model reads Markdown, reStructuredText and code as prose: it finds
"GitHub](https://..." or "arg1 + arg2" as organisations and people. ``ner_text`` blanks
what is not prose — code blocks and inline code, URLs, e-mail addresses, file paths, option
flags, code identifiers, HTML and the markup characters — with spaces of the same length
(newlines kept), so every offset into the cleaned text is an offset into the original and
paragraphs stay where they were. The text of a link stays, its target goes.

``is_name`` drops candidates that are not names whatever the model says (code identifiers,
versions, leftovers of markup, generic abbreviations), and ``shown_type`` is the type an
entity mention is given: on technical text (where ``ner_text`` blanked code, links or paths,
not shapes that prose has too, or that uses two words of programming: ``about_code``)
the model's types are wrong more often than right (docs/benchmarks.md, "Knowledge graph"),
so there only a person's name keeps its type and the rest are "unknown" — no type rather
than a wrong one. The type an entity is shown with is made of its mentions' types and a
gazetteer (workers/entity_types.py).

``kept`` asks a name for evidence that it is one before it is shown: a wrong entity costs a
user more than a missed one. Anywhere, a name needs a capital letter, a single word must not
also be written in lower case in the same chunk ("Format" beside "format"), and code words
(``None``, ``ValueError``) are not names. One exception, on prose only: such a find that is a
single rare word ("statin", "Rapamycin" beside "rapamycin": not a whole word of the MiniLM
tokenizer's vocabulary, ``rare_term``) is a term of a field and is shown, without a type:
the graph of a scientific text joins its passages by those; so is a code that ``is_name``
drops ("A20", "H3K9", "p53", "miR-155": ``science_code``). On technical text, where the
model takes a changelog's verbs and a docstring's class names for names, a single word must
also be a proper noun to the tagger and, at the head of a sentence or line, be written
capitalised mid-sentence somewhere in the chunk ("Avoid ..." at the head of a changelog
line is a verb, "Avery" mid-sentence is a name); an all-caps word of five characters or more
is a constant or shouting (``SIGKILL``, ``DAMAGES``), and a run of words with a verb in it
ran a name into the next words ("Olaf Kirch Signed-off"). Prose keeps what the model says (a
Wikipedia paragraph opens with its subject's name). docs/benchmarks.md, "Knowledge graph", says what
each rule removed on the judged samples.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from zapomni.shared.embedding.embed_onnx import load_tokenizer
from zapomni.shared.text.entities import UNKNOWN

_M = re.MULTILINE
# (pattern, group): 0 blanks the match; a group n > 0 stays and the rest of the match is
# blanked; -n: group n is blanked and the rest stays. What these blank makes a text technical.
_CODE: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"^[ \t]*(```|~~~).*?(?:^[ \t]*\1[^\n]*$|\Z)", _M | re.DOTALL), 0),
    # reStructuredText: a directive or comment with its indented body; a "::" literal block
    (re.compile(r"^\.\. .*(?:\n(?:[ \t]+\S.*|[ \t]*)$)*", _M), 0),
    (re.compile(r"::[ \t]*\n(?:[ \t]*\n)+((?:[ \t]+\S.*\n?|[ \t]*\n)+)", _M), -1),
    (re.compile(r"<!--.*?-->", re.DOTALL), 0),
    # a line of code in prose: a prompt, an import, a definition, an assignment, a brace
    (re.compile(r"^[ \t]*(?:>>>|\.\.\.(?=\s)|\$ |#!|import |from \S+ import |def |class \w+"
                r"[(:]|cdef |@\w|return\b|[\w.\[\]\"']+ *[-+*/]?= ).*$|^.*(?:[{;]|\);)[ \t]*$",
                _M), 0),
    (re.compile(r"`([^`<\n]{1,200}?)\s*<[^>\n]{1,500}>`__?"), 1),  # rST link: text stays
    (re.compile(r"(?::[\w:+-]+:)?``?[^`\n]{1,300}``?_{0,2}"), 0),  # inline code, rST roles
    (re.compile(r"!\[[^\]\n]{0,300}\]\([^)\n]{0,500}\)"), 0),  # images
    (re.compile(r"\[([^\]\n]{1,300})\]\([^)\n]{0,500}\)"), 1),  # Markdown link: text stays
    (re.compile(r"\[([^\]\n]{1,300})\]\[[^\]\n]{0,100}\]"), 1),
    (re.compile(r"^[ \t]*\[[^\]\n]{1,100}\]:.*$", _M), 0),  # link definitions
    (re.compile(r"</?[A-Za-z][^<>\n]{0,300}>"), 0),  # HTML tags, autolinks
    (re.compile(r"\b(?:[a-z][a-z+.-]{1,9}://|www\.)[^\s<>()\[\]]+", re.IGNORECASE), 0),
    (re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"), 0),  # e-mail
    (re.compile(r"(?<![\w/.])(?:~|\.{1,2})?/[\w.@%+-]+(?:/[\w.@%+-]*)*"), 0),  # /abs, ./rel
    (re.compile(r"\b[\w.-]+/[\w.-]+/[\w./-]*|\b[A-Za-z]:\\[^\s]*"), 0),  # a/b/c, C:\x
    # option flags (not a word's end after a prime, quote or bracket: "5'-nucleotidase",
    # "rock-'n'-roll", "(+)-induced"; a flag in quotes, "'--verbose'", is still one)
    (re.compile(r"(?<![\w′)\]-])(?<!\w['’])--?[A-Za-z][\w-]*(?:=\S*)?"), 0),
    (re.compile(r"\b\w+\([^()\n]{0,100}\)"), 0),  # calls
    (re.compile(r"\b[A-Za-z]\w*_\w+|\b_\w+"), 0),  # snake_case, _private
    (re.compile(r"\b[A-Za-z_]\w+(?:\.[A-Za-z_]\w*)+"), 0),  # dotted.paths, file.ext
    (re.compile(r"\b[a-z]+[A-Z]\w*"), 0),  # camelCase
)
# markup and versions: blanked, but prose has them too ("Windows 3.1.1", a heading)
_MARKUP: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"\bv\d+(?:\.\d+)+[\w.+-]*|\b\d+\.\d+\.\d+[\w.+-]*"), 0),  # versions
    # headings (a title is seldom a name, and the model reads one as a name)
    (re.compile(r"^[ \t]*#{1,6}[ \t].*$|^.+\n[=\-~^\"'`#*+]{3,}[ \t]*$", _M), 0),
    (re.compile(r"^[ \t]*(?:[=\-~^\"'`#*+_]{3,}|>+|[-*+](?=\s))", _M), 0),
    (re.compile(r"\*{1,3}|_{2,}|[|{}]"), 0),  # emphasis, tables, braces
)
_MASKS = tuple((pattern, keep, True) for pattern, keep in _CODE) + tuple(
    (pattern, keep, False) for pattern, keep in _MARKUP)


def _blank(text: str) -> str:
    return "".join("\n" if ch == "\n" else " " for ch in text)


# what the code patterns blank that an encyclopedia's prose has too, and so does not make a
# text technical (112 of the 2,884 HotpotQA and MuSiQue paragraphs were technical, most by
# these, and the name gate cost them their names; 16 are now, by URLs and identifiers):
# ``quotes'' in the LaTeX manner, a sentence run into the next ("airport.The", "Ph.D"), a
# brand with a small first letter ("iTunes"), a name before a bracket ("Karkun(Kam",
# "501(c)", "player(s)"), a one-part path ("/ref"), words between slashes
# ("producer/writer/composer"), a pronunciation ("/ɣut/") and wiki markup ("<ref>", "<br>").
# And the notation of science (SciFact: 410 of 2,000 abstracts were technical by these
# alone, and lost BRCA1, LIN28B, IL-6 to the rules for technical text): a small prefix before
# capitals ("miRNA", "siRNAs", "mtDNA", "kappaB"), a sign, number or symbol in brackets
# ("CD4(+)", "ml(-1)", "25(OH)", "p16(INK4a)"), "H2A.Z", names between slashes ("Akt/FOXO3a").
_PROSE_TOO = re.compile(r"``?[^`\n]*''[^`\n]*(?:``?)?_{0,2}|[A-Za-z]+(?:\.[A-Z][a-z]*)+|"
                        r"[a-z][A-Z]\w*|[A-Z][^\W\d_]*\([^()\n]*\)|\w+\([A-Za-z]\)|/[^/\s]+/?\.?|"
                        r"[^\W\d_]+(?:/[^\W\d_]+)+\.?|(?:/[A-Z][^\W\d_]*)+\.?|\S*[^\x00-\x7f]\S*|"
                        r"</?(?:ref|nowiki|br)\b[^<>\n]*>|"
                        r"[a-z]+[A-Z][A-Z\d]*s?|\w+\((?:[-+/\d.,]+|[A-Z][A-Z\d]*[a-z]?)\)|"
                        r"[A-Z\d]+\.[A-Z]|[A-Z\d][\w-]*(?:/[A-Z\d][\w-]*)+\.?")


def ner_text(text: str) -> tuple[str, bool]:
    """The text with what is not prose blanked (same length; newlines kept), and whether
    anything technical (code, links, addresses, paths, flags, identifiers; not the shapes
    prose has too, _PROSE_TOO) was blanked, or the text talks of code (about_code)."""
    technical = False
    for pattern, keep, code in _MASKS:
        def replace(match: re.Match[str], keep: int = keep, code: bool = code) -> str:
            nonlocal technical
            technical = technical or (code and bool(match.group().strip())
                                      and not _PROSE_TOO.fullmatch(match.group()))
            if keep == 0:
                return _blank(match.group())
            group = abs(keep)
            start, end = match.span(group)
            whole = match.group()
            first, last = start - match.start(), end - match.start()
            if keep < 0:  # the group is what goes (a literal block)
                return whole[:first] + _blank(whole[first:last]) + whole[last:]
            return _blank(whole[:first]) + whole[first:last] + _blank(whole[last:])
        text = pattern.sub(replace, text)
    return text, technical or about_code(text)


# words of programming that prose seldom uses: a chunk with two of them is about code even
# without markup ("Returns the parser instance for this header"; of the 2,884 Wikipedia
# paragraphs of HotpotQA and MuSiQue, 6 that no code pattern marks have two; 96% of
# 1,000-character pieces of packages' docstrings are technical with them against 93%
# without). Not the words science writes as often: function(s), method(s), response, self,
# variable(s), parameter(s), encode(d), implementation, interface, validate/validation. With
# them 929 of SciFact's 5,183 abstracts had two (and lost their gene names to the rules
# for technical text); without them 11 do, and 93.5% of 2,228 pieces of installed packages'
# docstrings still have two (97.4% with them)
_PROGRAMMING_WORDS = """
    returns argument arguments param attribute attributes module modules exception exceptions
    raises raised callable iterable iterator dict dictionary tuple integer int str bytes bool
    boolean kwargs args optional subclass subclasses instance instances string strings api
    implements wrapper decorator async coroutine config configuration parse parser decode
    decoded buffer request header headers schema serialize deserialize import default
    defaults"""
PROGRAMMING = frozenset(_PROGRAMMING_WORDS.split())
_LETTERS = re.compile(r"[A-Za-z]+")


def about_code(text: str) -> bool:
    """Whether a text uses two or more words of programming (PROGRAMMING)."""
    return len({word.lower() for word in _LETTERS.findall(text)} & PROGRAMMING) >= 2


_CODE_CHARS = re.compile(r"[\[\](){}<>=$@#|\\/*`^~;\"_]|^-|\s[-+*/%]\s")
_CAMEL = re.compile(r"[a-z][A-Z]")
_DOTTED = re.compile(r"\w\.\w{2,}")
_VERSION_OR_NUMBER = re.compile(r"^[vV]?[\d\W_]+$")
_WORD = re.compile(r"[^\W\d_]{2,}")


# abbreviations of kinds of things, or of formats and protocols that the model reads as an
# organisation or a person (names of standards, but not what a reader looks for in a graph)
GENERIC = frozenset({
    "AI", "API", "APIs", "CA", "CD", "CI", "CLI", "CPU", "CPUs", "CSV", "DB", "DNS", "FAQ",
    "GPU", "GPUs", "GUI", "HTTP", "HTTPS", "ID", "IDs", "IDE", "IO", "IP", "LLM", "LLMs", "ML",
    "NLP", "OS", "PDF", "PR", "PRs", "QA", "RAM", "README", "REST", "RPC", "SDK", "SDKs", "SQL",
    "SSD", "SSE", "SSH", "SSL", "TBC", "TBD", "TCP", "TLS", "TODO", "UDP", "UI", "URI", "URL",
    "URLs", "UX", "VM", "VMs", "XML", "YAML", "JSON", "HTML", "CSS",
})


def is_name(name: str) -> bool:
    """False for what cannot be a name: no word of two letters, code characters, a code
    identifier (camelCase, snake_case, dotted.path), a version or number, a generic
    abbreviation (API, CPU)."""
    if not _WORD.search(name) or _VERSION_OR_NUMBER.match(name) or name in GENERIC:
        return False
    if _CODE_CHARS.search(name) or _DOTTED.search(name):
        return False
    return not any(_CAMEL.search(word) and word[0].islower() for word in name.split())


# a code of science or engineering: letters and digits, from a letter ("A20", "H3K9",
# "p53", "B12", "H2A.Z", "miR-155"); a version ("v2") is none
_CODE_NAME = re.compile(r"^[A-Za-z][A-Za-z\d]*\d[A-Za-z\d]*(?:[-.][A-Za-z\d]+)*$"
                        r"|^[A-Za-z][A-Za-z\d]*(?:[-.][A-Za-z\d]*\d[A-Za-z\d]*)+$")
_CODE_NAME_MAX = 12


def science_code(name: str) -> bool:
    """A code that ``is_name`` drops (too few letters, or a camel-case part) and that prose
    uses as a name: "A20", "H3K9", "p53", "miR-155". On prose only (workers/extract.py)."""
    return (len(name) <= _CODE_NAME_MAX and bool(_CODE_NAME.match(name))
            and not _VERSION_OR_NUMBER.match(name) and not is_name(name))


_TITLE_WORD = re.compile(r"^(?:[A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)*|[A-Z]\.?)$")


def shown_type(kind: str, name: str, technical: bool, text: str = "") -> str:
    """The type an entity mention is given: the model's, unless it is not to be trusted
    here. On technical text the model calls software a person, a place or an organisation
    most of the time (docs/benchmarks.md, "Knowledge graph"): there only a person with a
    person's name (two to four capitalised words: "Cory Benfield", "Junio C. Hamano") keeps
    its type. Anywhere, a name in lower case (a command or package: "git", "urllib3"), a term
    (``is_term`` in its chunk ``text``: "statin", "Rapamycin" beside "rapamycin") and a code
    of science ("A20") have none: they are no person or organisation."""
    if name[:1].islower() or science_code(name) or is_term(name, text):
        return UNKNOWN
    if not technical:
        return kind
    words = name.split()
    if kind == "person" and 2 <= len(words) <= 4 and all(map(_TITLE_WORD.match, words)):
        return kind
    return UNKNOWN


# literals of Python and C, and class names of exceptions: code in prose, never names
_CODE_WORDS = frozenset({"None", "True", "False", "NULL", "Ellipsis", "NotImplemented"})
_EXCEPTION = re.compile(r"[A-Za-z\d](?:Error|Exception|Warning)$")
_ALL_CAPS = re.compile(r"^[A-Z][A-Z\d]*$")
_LOUD = 5  # an all-caps word this long or longer is read as a constant or shouting
_PROPER = frozenset({"NNP", "NNPS"})  # the tagger's proper nouns (Penn Treebank tags)
_HEADS = frozenset(".!?:;*-•>)#")  # a word after one of these begins a sentence or item


def at_head(text: str, at: int) -> bool:
    """Whether the word at offset ``at`` of ``text`` begins its line, a sentence or a list
    item: only blanks before it on its line, or sentence or list punctuation."""
    line = text[text.rfind("\n", 0, at) + 1:at].rstrip()
    return not line or line[-1] in _HEADS


def _occurrences(word: str, text: str, flags: int = 0) -> list[int]:
    return [m.start() for m in re.finditer(
        r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", text, flags)]


def capitalised_inside(word: str, text: str) -> bool:
    """Whether ``text`` has ``word`` as written somewhere not at the head of a sentence."""
    return any(not at_head(text, at) for at in _occurrences(word, text))


def written_lower(word: str, text: str) -> bool:
    """Whether ``text`` has ``word`` in lower case as a word of its own."""
    lower = word.lower()
    return lower != word and bool(_occurrences(lower, text))


def code_word(name: str) -> bool:
    return name in _CODE_WORDS or bool(_EXCEPTION.search(name))


@functools.cache
def common_words() -> frozenset[str]:
    """The whole words of the MiniLM tokenizer's vocabulary (WordPiece, 30,522 pieces): the
    common words of English ("guitar", "island", "cardiac"); a rarer word is cut into pieces
    ("statin", "rapamycin", "angiotensin")."""
    return frozenset(word for word in load_tokenizer().get_vocab() if word.isalpha())


def is_term(name: str, text: str) -> bool:
    """A find that is not written as a name: in lower case, or a single word also written in
    lower case in ``text`` ("Rapamycin" beside "rapamycin")."""
    return name.lower() == name or (" " not in name and written_lower(name, text))


def rare_term(name: str) -> bool:
    """A term of a field rather than a common word: a word of it of four letters or more is
    not a word of the tokenizer's vocabulary ("statin", "Rapamycin"; not "Music", "guitar")."""
    words = common_words()
    return any(len(w) >= 4 and w not in words for w in _WORD.findall(name.lower()))


def kept(name: str, tags: Sequence[str], head: bool, text: str, technical: bool) -> bool:
    """Whether a find that ``is_name`` is shown: ``tags`` are its words' part-of-speech tags,
    ``head`` says it begins a sentence or line, ``text`` is its chunk (as the model read it).
    See the module's docstring for the rules and why."""
    single = " " not in name
    if code_word(name):
        return False
    if science_code(name):  # on prose a code of science is what its graph joins by
        return not technical
    if is_term(name, text):  # on prose, a rare term stays: what science's graph joins by
        return not technical and single and rare_term(name)
    if not technical:
        return True
    if not single:
        return not any(tag.startswith("VB") for tag in tags)
    if _ALL_CAPS.match(name):
        return len(name) < _LOUD
    if not _PROPER.intersection(tags):
        return False
    return not head or capitalised_inside(name, text)
