"""Word material for the synthetic world: regional phonologies and English word lists.

Part of :mod:`hopgym.corpora.synthetic`. Every culture has its own syllable inventory,
so names from one region sound alike ("Qelvor", "Thalmir" vs "Tashiko", "Yurami"): an agent can
learn from a name alone which region, and so which source, an entity probably belongs to.

Generated names never contain ``.``, ``,``, `` or `` or a lower-case word, so questions and
sentences can be parsed back by the regexes the synthetic world publishes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "Culture",
    "CULTURES",
    "NameMaker",
    "COMPANY_SUFFIXES",
    "COMPANY_EXTENSIONS",
    "CITY_PREFIXES",
    "FILM_GENRES",
    "OCCUPATIONS",
    "MIRROR_SITES",
    "FIELDS",
]


@dataclass(frozen=True)
class Culture:
    """A naming region: syllables for words, and endings for places."""

    syllables: tuple[str, ...]
    city_suffixes: tuple[str, ...]
    country_suffixes: tuple[str, ...]
    female_endings: tuple[str, ...]


def _c(syl: str, city: str, country: str, fem: str) -> Culture:
    return Culture(tuple(syl.split()), tuple(city.split("|")), tuple(country.split()), tuple(fem.split()))


CULTURES: tuple[Culture, ...] = (
    _c(
        "qel vor thal mir dra kos vel sar lun ter bra nor est ka rin vol hed ost gar ul",
        "|by|holm|vik|stad",
        "ia and mark",
        "a e ie",
    ),
    _c(
        "ta shi ko ra mi no su ke ya hi to ma ri na chi zu ka se yo fu",
        "|ta|mura|hama|no",
        "ra ka to",
        "ko mi na",
    ),
    _c(
        "al ba dar zim ra hal qa mun sa fir oz dan ka lim nes tar jab ur hib sel",
        "|abad|kar|un|im",
        "istan ar ia",
        "a ya ra",
    ),
    _c(
        "po vlad ski rov ne mir sla ko va dre zo bor len tsa gro vik ol ye dan sta",
        "|grad|ovo|sk|in",
        "ova ia ostan",
        "a ka ina",
    ),
    _c(
        "lo ren zi ta bel mo ri an gia cel pa do vi na ser lu ca fe ro ti",
        "|ano|ella|ona|ico",
        "ia ino esa",
        "a ella ina",
    ),
    _c(
        "mba ko tu nde la se bo ki ya ze wa ndu ga lo ti ma ke ru ja nyo",
        "|ni|ville|bu|la",
        "ia wi go",
        "a e wa",
    ),
    _c(
        "ew lyn gar rhos bryn cad dor wen fyr hal tal mor cor ith yr gwen an dell pen wyn",
        "|ford|mouth|ton|wick",
        "ia land wyn",
        "wen a yn",
    ),
    _c(
        "xi quan tel ix och pa can te zal mo tla hua cu ayo nel co pil tza ma yol",
        "|tlan|co|pec|lan",
        "ca tlan mala",
        "a ih in",
    ),
)

COMPANY_SUFFIXES: dict[str, str] = {
    "Dynamics": "engineering",
    "Systems": "software",
    "Industries": "manufacturing",
    "Works": "steel",
    "Labs": "biotechnology",
    "Holdings": "investment",
    "Motors": "automotive",
    "Foods": "food processing",
    "Logistics": "shipping",
    "Textiles": "textile",
    "Energy": "energy",
    "Media": "media",
    "Pharma": "pharmaceutical",
    "Robotics": "robotics",
    "Airlines": "aviation",
    "Capital": "banking",
    "Telecom": "telecommunications",
    "Mining": "mining",
}
COMPANY_EXTENSIONS = ("Group", "International", "Partners", "Worldwide")
CITY_PREFIXES = ("New", "Port", "Upper", "Lower", "East", "West")

FILM_ADJECTIVES = tuple(
    """Silent Crimson Broken Hidden Last Golden Endless Frozen Burning Distant
Hollow Pale Wild Quiet Iron Lost Bitter Secret Northern Scarlet Sleeping Drowned Shattered
Forgotten Restless Wandering Hungry Savage Velvet Glass""".split()
)
FILM_NOUNS = tuple(
    """Crossing Harbor River Garden Empire Winter Summer Kingdom Journey Shadow
Mirror Tower Orchard Voyage Festival Lantern Frontier Storm Valley Island Season Covenant Signal
Whisper Bridge Carnival Lighthouse Requiem Passage Ember Horizon Canyon Fortress Meadow""".split()
)
FILM_GENRES = (
    "drama",
    "comedy",
    "thriller",
    "documentary",
    "science fiction",
    "horror",
    "musical",
    "western",
    "romance",
    "animated",
)
OCCUPATIONS = (
    "painter",
    "physicist",
    "architect",
    "novelist",
    "footballer",
    "politician",
    "chemist",
    "composer",
    "journalist",
    "engineer",
    "historian",
    "actor",
    "actor",
    "actor",
    "poet",
    "economist",
    "photographer",
    "surgeon",
)
FIELDS = (
    "modern art",
    "public health",
    "local politics",
    "literature",
    "urban design",
    "music",
    "sport",
    "education",
    "philanthropy",
    "science",
)
MIRROR_SITES = ("OpenLore", "FactVault", "WikiMirror", "Encyclopedia Mundi", "InfoAtlas")
_VOWELS = "aeiouy"


class NameMaker:
    """Draws names from culture syllables with a seeded generator.

    Uniform draws are buffered (one NumPy call per 64k draws) because a million names are made
    one by one in Python; the buffer keeps the stream deterministic for a given seed.

    Example:
        >>> maker = NameMaker(np.random.default_rng(0))
        >>> w = maker.word(0, 2)
        >>> w[0].isupper() and w[1:].islower()
        True
    """

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self._buf: list[float] = []
        self._pos = 0
        # Extra syllables for every word while a caller escalates after name collisions.
        self.extra = 0

    def u(self) -> float:
        """One uniform draw in [0, 1)."""
        if self._pos >= len(self._buf):
            self._buf = self.rng.random(65536).tolist()
            self._pos = 0
        x = self._buf[self._pos]
        self._pos += 1
        return x

    def pick(self, seq: tuple[str, ...] | list[str]) -> str:
        """A uniform element of ``seq``."""
        return seq[int(self.u() * len(seq))]

    def word(self, culture: int, n_syllables: int) -> str:
        """A capitalised word of ``n_syllables`` syllables from ``culture``'s inventory."""
        n_syllables += self.extra
        syl = CULTURES[culture].syllables
        parts: list[str] = []
        while len(parts) < n_syllables:
            x = syl[int(self.u() * len(syl))]
            if not parts or x != parts[-1]:  # no stutter ("Mirmir")
                parts.append(x)
        w = "".join(parts)
        return w[0].upper() + w[1:]

    def given(self, culture: int, female: bool) -> str:
        """A given name; female names end in one of the culture's female endings."""
        w = self.word(culture, 2)
        if female:
            end = self.pick(CULTURES[culture].female_endings)
            if not w.endswith(end):
                w = (w[:-1] if w[-1] in _VOWELS else w) + end
        elif w[-1] in "a":
            w = w[:-1] + "o"
        return w

    def family(self, culture: int) -> str:
        """A family name of two or three syllables."""
        return self.word(culture, 2 if self.u() < 0.6 else 3)

    def stem(self, culture: int) -> str:
        """A brand or place stem of two or three syllables."""
        return self.word(culture, 2 if self.u() < 0.5 else 3)

    def city(self, culture: int) -> str:
        """A city name: a stem plus, sometimes, a regional suffix."""
        return self.stem(culture) + self.pick(CULTURES[culture].city_suffixes)

    def country(self, culture: int) -> str:
        """A country name: a word plus a regional suffix."""
        w = self.word(culture, 2)
        suf = self.pick(CULTURES[culture].country_suffixes)
        if w[-1] in _VOWELS and suf[0] in _VOWELS:
            w = w[:-1]
        return w + suf

    def vowel_variant(self, word: str) -> str:
        """``word`` with one vowel changed: a confusable spelling ("Qelvor" -> "Qelvar")."""
        pos = [i for i, ch in enumerate(word) if ch.lower() in _VOWELS]
        if not pos:
            return word + "e"
        i = pos[int(self.u() * len(pos))]
        old = word[i].lower()
        new = self.pick(tuple(v for v in "aeiou" if v != old))
        if i == 0:
            new = new.upper()
        return word[:i] + new + word[i + 1 :]

    def film_title(self, culture: int) -> str:
        """A film title mixing English words with a regional word."""
        r = self.u()
        if r < 0.35:
            return f"The {self.pick(FILM_ADJECTIVES)} {self.pick(FILM_NOUNS)}"
        if r < 0.6:
            return f"{self.stem(culture)} {self.pick(FILM_NOUNS)}"
        if r < 0.8:
            return f"The {self.pick(FILM_NOUNS)} of {self.stem(culture)}"
        return f"{self.pick(FILM_ADJECTIVES)} {self.stem(culture)}"
