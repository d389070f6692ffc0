"""The synthetic world's documents: :class:`Writer` turns an entity of the graph into sentences.

Each entity type has its own method (``_person``, ``_company``, ...); which template of a fact
an entity's document uses is a digit of its packed template choice (:data:`SLOTS`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hopgym.corpora.synthetic.config import WorldConfig
from hopgym.corpora.synthetic.graph import Graph
from hopgym.corpora.synthetic.names import COMPANY_SUFFIXES, FIELDS, FILM_GENRES
from hopgym.corpora.synthetic.tables import SENTENCES

__all__ = ["Writer", "SLOTS", "chunks"]

SLOTS = {  # sentence key -> digit of the packed template choice
    "person.intro": 0,
    "person.birthplace": 1,
    "person.father": 2,
    "person.spouse": 3,
    "person.alma": 4,
    "company.intro": 0,
    "company.founded": 1,
    "film.main": 0,
    "city.main": 0,
    "city.founded": 1,
    "city.population": 2,
    "country.main": 0,
    "country.population": 1,
    "university.main": 0,
    "university.founded": 1,
}


def _a(noun: str) -> str:
    """``noun`` with its indefinite article."""
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _join(items: list[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


_PRONOUNS = (
    {"He": "He", "he": "he", "His": "His", "his": "his", "child": "son", "sibling": "brother"},
    {"He": "She", "he": "she", "His": "Her", "his": "her", "child": "daughter", "sibling": "sister"},
)

_Out = list[tuple[str, str]]


class Writer:
    """Writes documents from the graph; a pure function of the entity id.

    Everything is converted to Python lists up front: a million documents are written one by one,
    and list indexing is several times faster than NumPy scalar access.
    """

    def __init__(self, g: Graph, cfg: WorldConfig) -> None:
        self.g, self.v = g, cfg.phrasing_variety
        self.names = g.names
        self.etype = g.etype.tolist()
        self.year = g.year.tolist()
        self.pop = g.pop.tolist()
        self.female = g.female.tolist()
        self.tmpl = g.tmpl.tolist()
        self.rel = {k: v.tolist() for k, v in g.rel.items()}
        self.extra = {k: v.tolist() for k, v in g.extra.items()}
        self.confusable = g.confusable.tolist()
        self.industry = list(COMPANY_SUFFIXES.values())
        self.powers = [self.v**k for k in range(8)]
        self.occupation = g.occupation

        def lists(table: tuple[np.ndarray, np.ndarray]) -> tuple[list[int], list[int]]:
            return table[0].tolist(), table[1].tolist()

        self.children = lists(g.children)
        self.founded_by = lists(g.founded_by)
        self.directed_by = lists(g.directed_by)
        self.born_in = lists(g.born_in)
        self.alumni_of = lists(g.alumni_of)
        self.cities_of = lists(g.cities_of)
        # By entity type code (COUNTRY, CITY, PERSON, COMPANY, FILM, UNIVERSITY).
        self._by_type: tuple[Callable[[int, str, int, _Out], None], ...] = (
            self._country,
            self._city,
            self._person,
            self._company,
            self._film,
            self._university,
        )

    def choice(self, key: str, i: int) -> int:
        """Which template of sentence ``key`` entity ``i``'s document uses."""
        slot = SLOTS.get(key)
        if slot is None or len(SENTENCES[key]) == 1:
            return 0
        return (self.tmpl[i] // self.powers[slot]) % self.v

    @staticmethod
    def _few(table: tuple[list[int], list[int]], i: int, n: int) -> list[int]:
        starts, items = table
        a = starts[i]
        return items[a : min(starts[i + 1], a + n)]

    def sentences(self, i: int) -> list[tuple[str, str]]:
        """``(sentence key, sentence)`` pairs of entity ``i``'s document, in order."""
        out: _Out = []
        other = self.confusable[i]
        if other >= 0:
            out.append(("hatnote", SENTENCES["hatnote"][0].format(other=self.names[other])))
        self._by_type[self.etype[i]](i, self.names[i], self.tmpl[i], out)
        return out

    def _person(self, i: int, s: str, tm: int, out: _Out) -> None:
        nm, S, rel, pw, v = self.names, SENTENCES, self.rel, self.powers, self.v
        pr = _PRONOUNS[self.female[i]]
        out.append(
            (
                "person.intro",
                S["person.intro"][tm % v].format(s=s, a_occ=_a(self.occupation[i]), year=self.year[i], **pr),
            )
        )
        out.append(
            (
                "person.birthplace",
                S["person.birthplace"][(tm // pw[1]) % v].format(s=s, city=nm[rel["birthplace"][i]], **pr),
            )
        )
        f = rel["father"][i]
        if f >= 0:
            out.append(
                ("person.father", S["person.father"][(tm // pw[2]) % v].format(s=s, father=nm[f], **pr))
            )
        sp = rel["spouse"][i]
        if sp >= 0:
            out.append(
                ("person.spouse", S["person.spouse"][(tm // pw[3]) % v].format(s=s, spouse=nm[sp], **pr))
            )
        u = rel["alma"][i]
        if u >= 0:
            out.append(("person.alma", S["person.alma"][(tm // pw[4]) % v].format(s=s, univ=nm[u], **pr)))
        for c in self._few(self.founded_by, i, 1):
            out.append(
                ("person.founded", S["person.founded"][0].format(company=nm[c], year=self.year[c], **pr))
            )
        films = self._few(self.directed_by, i, 2)
        if films:
            out.append(
                ("person.directed", S["person.directed"][0].format(films=_join([nm[x] for x in films]), **pr))
            )
        if f >= 0:
            sibs = [x for x in self._few(self.children, f, 3) if x != i][:2]
            if sibs:
                out.append(
                    (
                        "person.siblings",
                        S["person.siblings"][0].format(sibs=_join([nm[x] for x in sibs]), **pr),
                    )
                )
        kids = self._few(self.children, i, 2)
        if kids:
            out.append(
                ("person.children", S["person.children"][0].format(kids=_join([nm[x] for x in kids]), **pr))
            )
        out.append(("person.field", S["person.field"][0].format(field=FIELDS[self.extra["field"][i]], **pr)))

    def _company(self, i: int, s: str, tm: int, out: _Out) -> None:
        nm, S, rel, v = self.names, SENTENCES, self.rel, self.v
        out.append(
            (
                "company.intro",
                S["company.intro"][tm % v].format(
                    s=s, a_industry=_a(self.industry[self.extra["code"][i]]), city=nm[rel["hq"][i]]
                ),
            )
        )
        out.append(
            (
                "company.founded",
                S["company.founded"][(tm // self.powers[1]) % v].format(
                    s=s, year=self.year[i], founder=nm[rel["founder"][i]]
                ),
            )
        )
        out.append(("company.size", S["company.size"][0].format(n=f"{self.extra['employees'][i]:,}")))
        out.append(("company.ceo", S["company.ceo"][0].format(person=nm[self.extra["ceo"][i]])))

    def _film(self, i: int, s: str, tm: int, out: _Out) -> None:
        nm, S = self.names, SENTENCES
        genre = FILM_GENRES[self.extra["code"][i]]
        out.append(
            (
                "film.main",
                S["film.main"][tm % self.v].format(
                    s=s,
                    year=self.year[i],
                    genre=genre,
                    a_genre=_a(genre),
                    director=nm[self.rel["director"][i]],
                ),
            )
        )
        a, b = self.extra["cast_a"][i], self.extra["cast_b"][i]
        if a >= 0 and b >= 0 and a != b:
            out.append(("film.cast", S["film.cast"][0].format(a=nm[a], b=nm[b])))
        out.append(("film.producer", S["film.producer"][0].format(company=nm[self.extra["producer"][i]])))
        out.append(("film.location", S["film.location"][0].format(city=nm[self.extra["location"][i]])))

    def _city(self, i: int, s: str, tm: int, out: _Out) -> None:
        nm, S, rel, pw, v = self.names, SENTENCES, self.rel, self.powers, self.v
        country = rel["country"][i]
        out.append(("city.main", S["city.main"][tm % v].format(s=s, country=nm[country])))
        out.append(("city.founded", S["city.founded"][(tm // pw[1]) % v].format(s=s, year=self.year[i])))
        out.append(
            ("city.population", S["city.population"][(tm // pw[2]) % v].format(s=s, pop=f"{self.pop[i]:,}"))
        )
        if rel["capital"][country] == i:
            out.append(("city.capital", S["city.capital"][0].format(country=nm[country])))
        people = self._few(self.born_in, i, 2)
        if len(people) == 2:
            out.append(("city.people", S["city.people"][0].format(s=s, a=nm[people[0]], b=nm[people[1]])))

    def _country(self, i: int, s: str, tm: int, out: _Out) -> None:
        nm, S, v = self.names, SENTENCES, self.v
        out.append(
            ("country.main", S["country.main"][tm % v].format(s=s, capital=nm[self.rel["capital"][i]]))
        )
        out.append(
            (
                "country.population",
                S["country.population"][(tm // self.powers[1]) % v].format(s=s, pop=f"{self.pop[i]:,}"),
            )
        )
        out.append(("country.independence", S["country.independence"][0].format(year=self.year[i])))
        big = self._few(self.cities_of, i, 2)
        if len(big) == 2:
            out.append(("country.cities", S["country.cities"][0].format(a=nm[big[0]], b=nm[big[1]])))

    def _university(self, i: int, s: str, tm: int, out: _Out) -> None:
        nm, S, v = self.names, SENTENCES, self.v
        out.append(
            ("university.main", S["university.main"][tm % v].format(s=s, city=nm[self.rel["univ_city"][i]]))
        )
        out.append(
            (
                "university.founded",
                S["university.founded"][(tm // self.powers[1]) % v].format(s=s, year=self.year[i]),
            )
        )
        alumni = self._few(self.alumni_of, i, 2)
        if len(alumni) == 2:
            out.append(
                ("university.alumni", S["university.alumni"][0].format(a=nm[alumni[0]], b=nm[alumni[1]]))
            )
        out.append(
            ("university.field", S["university.field"][0].format(field=FIELDS[self.extra["field"][i]]))
        )


def chunks(n_sent: int, ppd: int) -> list[int]:
    """Sentence counts per passage: ``n_sent`` split into ``ppd`` near-equal contiguous parts."""
    base, rem = divmod(n_sent, ppd)
    return [base + (1 if j < rem else 0) for j in range(ppd)]
