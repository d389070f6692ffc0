"""The synthetic world's entity graph: entities, relations, attributes and names.

:func:`build_graph` runs its phases in a fixed order, each drawing from the same generator, so
the graph (and hence every passage and question) is a pure function of the config:

1. layout: how many entities of each type (:func:`counts`);
2. places: countries and cities, populations, founding years, capitals;
3. people: birthplaces (hence regions), birth years, gender, fathers, spouses;
4. universities and who studied there; companies and their founders; films and their
   directors; occupations and film casts;
5. names, in dependency order (fathers before sons, cities before universities), with
   confusable near-namesakes (:class:`_Namer`);
6. the held-out test entities and the regions the ``local`` source covers (their own
   generators), twins, template choices and document numbers.

The order of the random draws is part of the world's identity: moving a draw from one phase to
another changes every world (``tests/corpora/test_synthetic.py`` pins their fingerprints).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hopgym.corpora.synthetic.config import WorldConfig
from hopgym.corpora.synthetic.names import (
    CITY_PREFIXES,
    COMPANY_EXTENSIONS,
    COMPANY_SUFFIXES,
    CULTURES,
    FIELDS,
    FILM_GENRES,
    OCCUPATIONS,
    NameMaker,
)
from hopgym.corpora.synthetic.tables import (
    CITY,
    COMPANY,
    COUNTRY,
    FILM,
    PERSON,
    RELATIONS,
    UNIVERSITY,
)

__all__ = ["Graph", "build_graph", "csr", "counts"]

_FATHER_SHARE = 0.4  # share of men who father children


@dataclass
class Graph:
    """Entities as parallel arrays indexed by an internal id (types in contiguous blocks)."""

    etype: np.ndarray
    culture: np.ndarray
    names: list[str]
    rel: dict[str, np.ndarray]
    year: np.ndarray
    pop: np.ndarray
    female: np.ndarray
    occupation: list[str]
    extra: dict[str, np.ndarray]  # misc ints: industry/genre codes, mentions, doc numbers ...
    confusable: np.ndarray  # id of the entity this one is a near-namesake of, or -1
    twin: np.ndarray  # a near-namesake in either direction (incl. "II" sons), or -1
    test: np.ndarray  # held-out test entity
    by_type: dict[int, np.ndarray]
    children: tuple[np.ndarray, np.ndarray]  # CSR (starts, items) over persons' father links
    founded_by: tuple[np.ndarray, np.ndarray]
    directed_by: tuple[np.ndarray, np.ndarray]
    born_in: tuple[np.ndarray, np.ndarray]
    alumni_of: tuple[np.ndarray, np.ndarray]
    cities_of: tuple[np.ndarray, np.ndarray]
    tmpl: np.ndarray  # per entity: packed template choices
    docnum: np.ndarray
    local: np.ndarray  # bool, covered by the local source
    covered_cultures: tuple[int, ...]

    def target(self, rel: str, i: int) -> int:
        return int(self.rel[rel][i])


def csr(
    keys: np.ndarray, values: np.ndarray, n: int, order_by: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Group ``values`` by ``keys`` (>= 0) into CSR arrays ``(starts, items)`` over ``n`` keys.

    Example:
        >>> starts, items = csr(np.array([2, 0, 2, 1, -1]), np.arange(5), 3)
        >>> [items[starts[k]:starts[k + 1]].tolist() for k in range(3)]
        [[1], [3], [0, 2]]
    """
    ok = keys >= 0
    keys, values = keys[ok], values[ok]
    # np.lexsort sorts by its last key first: group by key, then by value (or ``order_by``).
    sort_key = (values, keys) if order_by is None else (order_by[ok], keys)
    order = np.lexsort(sort_key)
    keys, values = keys[order], values[order]
    starts = np.searchsorted(keys, np.arange(n + 1))
    return starts, values


def counts(n: int) -> dict[int, int]:
    """Entities per type for a world of ``n`` entities."""
    n_country = int(np.clip(round(n**0.5 / 3), 4, 300))
    n_city = max(2 * n_country, int(0.08 * n))
    n_univ = max(n_country, int(0.04 * n))
    n_company = max(8, int(0.13 * n))
    n_film = max(8, int(0.13 * n))
    n_person = n - n_country - n_city - n_univ - n_company - n_film
    return {
        COUNTRY: n_country,
        CITY: n_city,
        PERSON: n_person,
        COMPANY: n_company,
        FILM: n_film,
        UNIVERSITY: n_univ,
    }


@dataclass
class _Draft:
    """The graph while its phases fill it in (every phase draws from ``rng``, in order)."""

    cfg: WorldConfig
    rng: np.random.Generator
    n: int
    etype: np.ndarray
    by_type: dict[int, np.ndarray]
    n_cult: int
    culture: np.ndarray
    rel: dict[str, np.ndarray]
    year: np.ndarray
    pop: np.ndarray
    female: np.ndarray
    extra: dict[str, np.ndarray]
    cities_of: tuple[np.ndarray, np.ndarray] = field(default_factory=lambda: (np.empty(0),) * 2)
    adults: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    occupation: list[str] = field(default_factory=list)

    def same_culture(self, pool: np.ndarray, cult: np.ndarray, p_same: float) -> np.ndarray:
        """For each culture in ``cult``, a random member of ``pool`` of that culture (p_same)."""
        rng, culture = self.rng, self.culture
        out = np.empty(len(cult), dtype=np.int64)
        cross = rng.random(len(cult)) >= p_same
        groups = {c: pool[culture[pool] == c] for c in range(self.n_cult)}
        draws = rng.random(len(cult))
        for j, c in enumerate(cult.tolist()):
            g = groups.get(c)
            if cross[j] or g is None or len(g) == 0:
                g = pool
            out[j] = g[int(draws[j] * len(g))]
        return out


def _layout(cfg: WorldConfig, rng: np.random.Generator) -> _Draft:
    n = cfg.n_entities
    count = counts(n)
    etype = np.concatenate([np.full(count[t], t, dtype=np.int8) for t in range(6)])
    by_type: dict[int, np.ndarray] = {}
    start = 0
    for t in range(6):
        by_type[t] = np.arange(start, start + count[t])
        start += count[t]
    return _Draft(
        cfg=cfg,
        rng=rng,
        n=n,
        etype=etype,
        by_type=by_type,
        n_cult=min(len(CULTURES), count[COUNTRY]),
        culture=np.zeros(n, dtype=np.int16),
        rel={r: np.full(n, -1, dtype=np.int64) for r in RELATIONS},
        year=np.zeros(n, dtype=np.int64),
        pop=np.zeros(n, dtype=np.int64),
        female=np.zeros(n, dtype=bool),
        extra={
            k: np.full(n, -1, dtype=np.int64)
            for k in ("code", "ceo", "cast_a", "cast_b", "producer", "location", "employees", "field")
        },
    )


def _places(d: _Draft) -> None:
    """Countries and cities: regions, populations, founding years, capitals."""
    rng, rel, culture, pop, year = d.rng, d.rel, d.culture, d.pop, d.year
    countries, cities = d.by_type[COUNTRY], d.by_type[CITY]
    culture[countries] = np.arange(len(countries)) % d.n_cult
    ccountry = np.concatenate([countries, rng.choice(countries, len(cities) - len(countries))])
    rel["country"][cities] = ccountry
    culture[cities] = culture[ccountry]
    pop[cities] = np.round(np.exp(rng.normal(11.0, 1.1, len(cities)))).astype(np.int64) + 500
    year[cities] = rng.integers(700, 1950, len(cities))
    # The first city of each country is its capital (and a big one).
    rel["capital"][countries] = cities[: len(countries)]
    pop[cities[: len(countries)]] *= 4
    year[countries] = rng.integers(1200, 1995, len(countries))
    d.cities_of = cities_of = csr(rel["country"][cities], cities, d.n, order_by=-pop[cities])
    for c in countries:  # country population: its cities times a factor
        members = cities_of[1][cities_of[0][c] : cities_of[0][c + 1]]
        pop[c] = int(pop[members].sum() * 3 + 10_000)


def _people(d: _Draft) -> None:
    """People: birthplace (-> culture), birth year, gender, fathers, spouses."""
    rng, rel, culture, year, female = d.rng, d.rel, d.culture, d.year, d.female
    persons = d.by_type[PERSON]
    bcity = rng.choice(d.by_type[CITY], len(persons))
    rel["birthplace"][persons] = bcity
    culture[persons] = culture[bcity]
    year[persons] = rng.integers(1800, 2006, len(persons))
    female[persons] = rng.random(len(persons)) < 0.5
    for c in range(d.n_cult):
        idx = persons[culture[persons] == c]
        idx = idx[np.argsort(year[idx], kind="stable")]
        males = idx[~female[idx]]
        # Fathers come from a share of the men, so families have several children (siblings
        # share a surname and name each other on their pages).
        sires = males[rng.random(len(males)) < _FATHER_SHARE]
        my = year[sires]
        lo = np.searchsorted(my, year[idx] - 45, "left")
        hi = np.searchsorted(my, year[idx] - 20, "right")
        has = (hi > lo) & (rng.random(len(idx)) < 0.85)
        pick = lo + np.floor(rng.random(len(idx)) * (hi - lo)).astype(np.int64)
        rel["father"][idx[has]] = sires[np.minimum(pick, len(sires) - 1)[has]]
        fem = idx[female[idx]]
        m_sel = males[rng.random(len(males)) < 0.65]
        f_sel = fem[rng.random(len(fem)) < 0.65]
        k = min(len(m_sel), len(f_sel))
        rel["spouse"][m_sel[:k]] = f_sel[:k]
        rel["spouse"][f_sel[:k]] = m_sel[:k]


def _universities(d: _Draft) -> None:
    """Universities and their alumni (needed before alma mater)."""
    rng, rel, culture, persons = d.rng, d.rel, d.culture, d.by_type[PERSON]
    univs = d.by_type[UNIVERSITY]
    ucity = rng.choice(d.by_type[CITY], len(univs))
    rel["univ_city"][univs] = ucity
    culture[univs] = culture[ucity]
    d.year[univs] = rng.integers(1100, 1990, len(univs))
    studied = rng.random(len(persons)) < 0.7
    rel["alma"][persons[studied]] = d.same_culture(univs, culture[persons[studied]], 0.85)


def _companies(d: _Draft) -> None:
    """Companies: founder from a pool of entrepreneurs, hq city mostly in the founder's region."""
    rng, rel, year, extra, persons = d.rng, d.rel, d.year, d.extra, d.by_type[PERSON]
    companies = d.by_type[COMPANY]
    d.adults = adults = persons[year[persons] <= 1990]
    founders_pool = (
        rng.choice(adults, max(1, len(companies) // 2), replace=False)
        if len(adults) >= max(1, len(companies) // 2)
        else adults
    )
    comp_cult = rng.integers(0, d.n_cult, len(companies))
    d.culture[companies] = comp_cult
    rel["founder"][companies] = d.same_culture(founders_pool, comp_cult, 0.85)
    rel["hq"][companies] = d.same_culture(d.by_type[CITY], comp_cult, 0.85)
    year[companies] = np.minimum(year[rel["founder"][companies]] + rng.integers(22, 60, len(companies)), 2024)
    extra["employees"][companies] = np.round(np.exp(rng.normal(6.5, 1.5, len(companies)))) + 5
    extra["ceo"][companies] = rng.choice(adults, len(companies))


def _films(d: _Draft) -> None:
    """Films: director from a pool of film makers; genre, producer, location; research fields."""
    rng, rel, year, extra, adults = d.rng, d.rel, d.year, d.extra, d.adults
    films = d.by_type[FILM]
    # Film makers are born after 1860, so that films date from the age of cinema.
    modern = adults[year[adults] >= 1860]
    modern = modern if len(modern) else adults
    directors_pool = (
        rng.choice(modern, max(1, len(films) // 3), replace=False)
        if len(modern) >= max(1, len(films) // 3)
        else modern
    )
    film_cult = rng.integers(0, d.n_cult, len(films))
    d.culture[films] = film_cult
    rel["director"][films] = d.same_culture(directors_pool, film_cult, 0.85)
    year[films] = np.minimum(year[rel["director"][films]] + rng.integers(25, 60, len(films)), 2024)
    extra["code"][films] = rng.integers(0, len(FILM_GENRES), len(films))
    extra["producer"][films] = rng.choice(d.by_type[COMPANY], len(films))
    extra["location"][films] = d.same_culture(d.by_type[CITY], film_cult, 0.85)
    extra["field"][:] = rng.integers(0, len(FIELDS), d.n)


def _occupations(d: _Draft) -> None:
    """Occupations (founders and directors by their role) and film casts (from the actors)."""
    rel, female, persons = d.rel, d.female, d.by_type[PERSON]
    occ_draw = d.rng.integers(0, len(OCCUPATIONS), d.n).tolist()
    occupation = [""] * d.n
    for p in persons.tolist():
        occupation[p] = OCCUPATIONS[occ_draw[p]]
    for p in set(rel["founder"][d.by_type[COMPANY]].tolist()):
        occupation[p] = "businessman" if not female[p] else "businesswoman"
    for p in set(rel["director"][d.by_type[FILM]].tolist()):
        occupation[p] = "film director"
    d.occupation = occupation
    actors = persons[np.array([occupation[p] == "actor" for p in persons.tolist()], dtype=bool)]
    if len(actors) >= 2:
        films = d.by_type[FILM]
        film_cult = d.culture[films]
        d.extra["cast_a"][films] = d.same_culture(actors, film_cult, 0.85)
        d.extra["cast_b"][films] = d.same_culture(actors, film_cult, 0.85)


class _Namer:
    """Names every entity, in dependency order, with confusable near-namesakes.

    A share ``distractors`` of names copy an earlier name with a change ("Qelvor Dynamics" /
    "Qelvor Dynamics Group"); sons may be named after their fathers ("Kiro Lant II").
    """

    def __init__(self, d: _Draft) -> None:
        self.d = d
        self.maker = NameMaker(d.rng)
        self.names = [""] * d.n
        self.taken: set[str] = set()
        self.confusable = np.full(d.n, -1, dtype=np.int64)
        self.has_variant = np.zeros(d.n, dtype=bool)
        self.namesake = np.full(d.n, -1, dtype=np.int64)  # sons named after their fathers

    def claim(self, i: int, name: str) -> bool:
        if name in self.taken or " or " in name or "," in name:
            return False
        self.taken.add(name)
        self.names[i] = name
        return True

    def fresh(self, i: int, make: Any) -> None:
        """Claim a new name from ``make()``, with longer words after repeated collisions."""
        maker = self.maker
        for attempt in range(10_000):
            maker.extra = attempt // 20
            if self.claim(i, make()):
                maker.extra = 0
                return
        raise RuntimeError("name space exhausted")  # pragma: no cover - 10k collisions

    def variant(self, i: int, pool: list[int], j: int, make_variant: Any, p: float) -> bool:
        """With probability ``p``, name ``i`` after an earlier entity of ``pool`` (confusable).

        Each original gets at most one near-namesake, and near-namesakes get none, so a name
        has at most one confusable sibling.
        """
        maker = self.maker
        if j == 0 or maker.u() >= p:
            return False
        other = pool[int(maker.u() * j)]
        if self.has_variant[other] or self.confusable[other] >= 0:
            return False
        if self.claim(i, make_variant(self.names[other])):
            self.confusable[i] = other
            self.has_variant[other] = True
            return True
        return False

    def places(self) -> None:
        maker, culture, by_type = self.maker, self.d.culture, self.d.by_type

        def city_variant(name: str) -> str:
            if maker.u() < 0.6:
                return f"{maker.pick(CITY_PREFIXES)} {name}"
            return maker.vowel_variant(name)

        for c in by_type[COUNTRY].tolist():
            self.fresh(c, lambda c=c: maker.country(int(culture[c])))
        city_list = by_type[CITY].tolist()
        for j, c in enumerate(city_list):
            if not self.variant(c, city_list, j, city_variant, self.d.cfg.distractors * 0.5):
                self.fresh(c, lambda c=c: maker.city(int(culture[c])))

    def people(self) -> None:
        """Given names from a small regional pool, surnames inherited from fathers."""
        d, maker, names = self.d, self.maker, self.names
        persons, dist = d.by_type[PERSON], d.cfg.distractors
        given_pool: dict[tuple[int, bool], list[str]] = {}
        fam_pool: dict[int, list[str]] = {}
        n_per_cult = max(1, len(persons) // d.n_cult)
        for c in range(d.n_cult):
            for fem in (False, True):
                given_pool[c, fem] = [maker.given(c, fem) for _ in range(max(12, min(600, n_per_cult // 25)))]
            fam_pool[c] = list(dict.fromkeys(maker.family(c) for _ in range(max(8, n_per_cult // 4))))
        family = [""] * d.n
        fathers = d.rel["father"].tolist()
        for p in persons[np.argsort(d.year[persons], kind="stable")].tolist():
            cu = int(d.culture[p])
            fem = bool(d.female[p])
            f = fathers[p]
            if f >= 0:
                fam = family[f]
            else:
                fam = maker.pick(fam_pool[cu])
                if maker.u() < dist * 0.3:
                    fam = maker.vowel_variant(fam)
            family[p] = fam
            # A share of sons are named after their fathers ("Kiro Lant" -> "Kiro Lant II"), so
            # a search for the father also finds the son, whose page names the father.
            if f >= 0 and not fem and maker.u() < dist * 0.9 and not names[f].endswith(" III"):
                if self.claim(p, names[f][:-3] + " III" if names[f].endswith(" II") else names[f] + " II"):
                    self.namesake[p] = f
                    continue
            pool = given_pool[cu, fem]
            self.fresh(
                p,
                lambda fam=fam, pool=pool, cu=cu, fem=fem: (
                    f"{maker.pick(pool)} {fam}" if maker.extra == 0 else f"{maker.given(cu, fem)} {fam}"
                ),
            )

    def universities(self) -> None:
        """Mostly named after their city, so "University of X" is confusable with X."""
        maker, d = self.maker, self.d
        for u in d.by_type[UNIVERSITY].tolist():
            cname = self.names[int(d.rel["univ_city"][u])]
            cu = int(d.culture[u])
            for form in (
                f"University of {cname}",
                f"{cname} Institute of Technology",
                f"{cname} State University",
            ):
                if self.claim(u, form):
                    break
            else:
                self.fresh(
                    u,
                    lambda cu=cu: (
                        f"{maker.family(cu)} College" if maker.u() < 0.5 else f"{maker.stem(cu)} University"
                    ),
                )

    def companies(self) -> None:
        """Names as "Stem Suffix"; confusables extend the name, swap the suffix or respell it."""
        maker, d = self.maker, self.d
        suffixes = tuple(COMPANY_SUFFIXES)
        comp_list = d.by_type[COMPANY].tolist()

        def company_variant(name: str) -> str:
            stem, suf = name.split(" ", 1)
            r = maker.u()
            if r < 0.7:
                return f"{stem} {suf.split(' ')[0]} {maker.pick(COMPANY_EXTENSIONS)}"
            if r < 0.85:
                return f"{stem} {maker.pick(suffixes)}"
            return f"{maker.vowel_variant(stem)} {suf}"

        for j, c in enumerate(comp_list):
            if not self.variant(c, comp_list, j, company_variant, d.cfg.distractors):
                self.fresh(c, lambda c=c: f"{maker.stem(int(d.culture[c]))} {maker.pick(suffixes)}")
            d.extra["code"][c] = suffixes.index(self.names[c].split(" ")[1])

    def films(self) -> None:
        """Confusables are sequels ("X II") or respellings of one word."""
        maker, d = self.maker, self.d
        film_list = d.by_type[FILM].tolist()

        def film_variant(name: str) -> str:
            if maker.u() < 0.7:
                return f"{name[:-3]} III" if name.endswith(" II") else f"{name} II"
            words = name.split(" ")
            k = int(maker.u() * len(words))
            if words[k] in ("The", "of", "II", "III"):
                k = 1 if words[0] == "The" else 0
            words[k] = maker.vowel_variant(words[k])
            return " ".join(words)

        for j, f in enumerate(film_list):
            if not self.variant(f, film_list, j, film_variant, d.cfg.distractors):
                self.fresh(f, lambda f=f: maker.film_title(int(d.culture[f])))


def _held_out_and_coverage(
    d: _Draft, split_rng: np.random.Generator, route_rng: np.random.Generator
) -> tuple[np.ndarray, tuple[int, ...], np.ndarray]:
    """Held-out test entities, and the regions (and entities) the ``local`` source covers."""
    cfg, n_cult = d.cfg, d.n_cult
    test = np.zeros(d.n, dtype=bool)
    if cfg.test_fraction > 0:
        test[:] = split_rng.random(d.n) < cfg.test_fraction
        test[d.by_type[COUNTRY]] = False
    covered: tuple[int, ...]
    if len(cfg.sources) == 1 or cfg.local_coverage >= 1.0:
        covered = tuple(range(n_cult))
    else:
        k = int(np.clip(round(cfg.local_coverage * n_cult), 1, n_cult - 1))
        covered = tuple(sorted(route_rng.permutation(n_cult)[:k].tolist()))
    local = np.isin(d.culture, np.array(covered))
    return test, covered, local


def build_graph(
    cfg: WorldConfig, rng: np.random.Generator, split_rng: np.random.Generator, route_rng: np.random.Generator
) -> Graph:
    """The entity graph of the world ``cfg`` (phases in the module docstring's order).

    Args:
        cfg: the world's config.
        rng: the graph's generator (every phase but the split and the coverage).
        split_rng: draws the held-out test entities.
        route_rng: draws the regions the ``local`` source covers.
    """
    d = _layout(cfg, rng)
    for phase in (_places, _people, _universities, _companies, _films, _occupations):
        phase(d)
    namer = _Namer(d)
    namer.places()
    namer.people()
    namer.universities()
    namer.companies()
    namer.films()
    test, covered, local = _held_out_and_coverage(d, split_rng, route_rng)

    # Each entity's closest namesake (either direction), for hard comparison pairs.
    n, rel = d.n, d.rel
    twin = np.full(n, -1, dtype=np.int64)
    for arr in (namer.confusable, namer.namesake):
        src = np.nonzero(arr >= 0)[0]
        twin[src] = arr[src]
        twin[arr[src]] = src

    # Template choices (base-variety digits) and doc numbers (shuffled so ids hide types).
    tmpl = rng.integers(0, cfg.phrasing_variety**8, n)
    docnum = rng.permutation(n)
    return Graph(
        etype=d.etype,
        culture=d.culture,
        names=namer.names,
        rel=rel,
        year=d.year,
        pop=d.pop,
        female=d.female,
        occupation=d.occupation,
        extra=d.extra,
        confusable=namer.confusable,
        twin=twin,
        test=test,
        by_type=d.by_type,
        children=csr(rel["father"], np.arange(n), n),
        founded_by=csr(rel["founder"], np.arange(n), n),
        directed_by=csr(rel["director"], np.arange(n), n),
        born_in=csr(rel["birthplace"], np.arange(n), n),
        alumni_of=csr(rel["alma"], np.arange(n), n),
        cities_of=d.cities_of,
        tmpl=tmpl,
        docnum=docnum,
        local=local,
        covered_cultures=covered,
    )
