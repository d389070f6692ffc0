"""The synthetic world's phrasing tables: how each fact is written and asked.

Entity type codes, the relations and attributes of the entity graph, and the templates the world
writes documents and questions with (:data:`SENTENCES`, :data:`NOUN_PHRASES`, :data:`QUESTIONS`,
:data:`COMPARISONS`, :data:`BRIDGE_COMPARISONS`, :data:`INFERENCES`), where each fact is stated
(:data:`RELATION_SENTENCES`) and the oracle's search words (:data:`QUERY_WORDS`). The rule-based
:class:`~hopgym.agents.iterative.IterativeAgent` reads questions and passages back with the
same tables. Name material (syllables per region) is in :mod:`hopgym.corpora.synthetic.names`.
"""

from __future__ import annotations

__all__ = [
    "COUNTRY",
    "CITY",
    "PERSON",
    "COMPANY",
    "FILM",
    "UNIVERSITY",
    "TYPE_NAMES",
    "SENTENCES",
    "RELATIONS",
    "ATTRIBUTES",
    "RELATION_SENTENCES",
    "FACT_KEY",
    "NOUN_PHRASES",
    "QUESTIONS",
    "SUB_QUESTIONS",
    "QUERY_WORDS",
    "COMPARISONS",
    "BRIDGE_COMPARISONS",
    "INFERENCES",
    "LOCAL_COST",
    "WEB_COST",
]

# Entity types (codes in the internal arrays).
COUNTRY, CITY, PERSON, COMPANY, FILM, UNIVERSITY = range(6)
TYPE_NAMES = ("country", "city", "person", "company", "film", "university")

# ---------------------------------------------------------------------------------------------
# Phrasing tables. Fields: {s} subject name; {He} {he} {His} {his} {child} pronouns; the rest are
# entity names, years or numbers. Entity names never contain "." or ",", so a sentence can be
# matched back with a regex built from its template (see hopgym.agents.iterative).
# ---------------------------------------------------------------------------------------------
SENTENCES: dict[str, tuple[str, ...]] = {
    "hatnote": ("Not to be confused with {other}.",),
    "person.intro": (
        "{s} (born {year}) is {a_occ}.",
        "{s} is {a_occ}, born in {year}.",
        "{s} is {a_occ} who was born in {year}.",
    ),
    "person.birthplace": (
        "{He} was born in {city}.",
        "{s} was born in the city of {city}.",
        "{His} birthplace is {city}.",
    ),
    "person.father": (
        "{He} is the {child} of {father}.",
        "{His} father is {father}.",
        "{s} was raised by {his} father {father}.",
    ),
    "person.spouse": ("{He} is married to {spouse}.", "{His} spouse is {spouse}.", "{s} married {spouse}."),
    "person.alma": ("{He} studied at {univ}.", "{He} graduated from {univ}.", "{s} is a graduate of {univ}."),
    "person.founded": ("{He} founded {company} in {year}.",),
    "person.directed": ("{His} films as director include {films}.",),
    "person.children": ("{His} children include {kids}.",),
    "person.siblings": ("{He} is the {sibling} of {sibs}.",),
    "person.field": ("{He} is known for {his} work in {field}.",),
    "company.intro": (
        "{s} is {a_industry} company headquartered in {city}.",
        "{s} is {a_industry} firm based in {city}.",
        "{s} is {a_industry} company with its headquarters in {city}.",
    ),
    "company.founded": (
        "It was founded in {year} by {founder}.",
        "The company was established by {founder} in {year}.",
        "{founder} founded {s} in {year}.",
    ),
    "company.size": ("It employs about {n} people.",),
    "company.ceo": ("Its chief executive is {person}.",),
    "film.main": (
        "{s} is a {year} {genre} film directed by {director}.",
        "{s} is {a_genre} film directed by {director} and released in {year}.",
        "Directed by {director}, {s} is {a_genre} film from {year}.",
    ),
    "film.cast": ("It stars {a} and {b}.",),
    "film.producer": ("The film was produced by {company}.",),
    "film.location": ("It was shot in {city}.",),
    "city.main": (
        "{s} is a city in {country}.",
        "{s} is a town located in {country}.",
        "{s} lies in {country}.",
    ),
    "city.founded": (
        "It was founded in {year}.",
        "The city was established in {year}.",
        "{s} was founded in {year}.",
    ),
    "city.population": (
        "It has a population of {pop}.",
        "About {pop} people live in {s}.",
        "{s} has {pop} inhabitants.",
    ),
    "city.capital": ("It is the capital of {country}.",),
    "city.people": ("Notable people born in {s} include {a} and {b}.",),
    "country.main": (
        "{s} is a country whose capital is {capital}.",
        "The capital of {s} is {capital}.",
        "{capital} is the capital city of {s}.",
    ),
    "country.population": (
        "It has a population of {pop}.",
        "{s} is home to {pop} people.",
        "About {pop} people live in {s}.",
    ),
    "country.independence": ("It became independent in {year}.",),
    "country.cities": ("Its largest cities include {a} and {b}.",),
    "university.main": (
        "{s} is a public university in {city}.",
        "{s} is a university located in {city}.",
        "{s} is a research university based in {city}.",
    ),
    "university.founded": (
        "It was founded in {year}.",
        "The university was established in {year}.",
        "{s} was founded in {year}.",
    ),
    "university.alumni": ("Its alumni include {a} and {b}.",),
    "university.field": ("It is known for its programmes in {field}.",),
}

# relation -> (source type, target type)
RELATIONS: dict[str, tuple[int, int]] = {
    "director": (FILM, PERSON),
    "founder": (COMPANY, PERSON),
    "hq": (COMPANY, CITY),
    "univ_city": (UNIVERSITY, CITY),
    "birthplace": (PERSON, CITY),
    "father": (PERSON, PERSON),
    "spouse": (PERSON, PERSON),
    "alma": (PERSON, UNIVERSITY),
    "country": (CITY, COUNTRY),
    "capital": (COUNTRY, CITY),
}
# attribute -> types that have it
ATTRIBUTES: dict[str, tuple[int, ...]] = {
    "birth_year": (PERSON,),
    "founded": (COMPANY, UNIVERSITY, CITY),
    "released": (FILM,),
    "population": (CITY, COUNTRY),
}

# (relation or attribute) -> [(sentence key, field holding the value)]: where each fact is written.
RELATION_SENTENCES: dict[str, tuple[tuple[str, str], ...]] = {
    "director": (("film.main", "director"),),
    "founder": (("company.founded", "founder"),),
    "hq": (("company.intro", "city"),),
    "univ_city": (("university.main", "city"),),
    "birthplace": (("person.birthplace", "city"),),
    "father": (("person.father", "father"),),
    "spouse": (("person.spouse", "spouse"),),
    "alma": (("person.alma", "univ"),),
    "country": (("city.main", "country"),),
    "capital": (("country.main", "capital"),),
    "birth_year": (("person.intro", "year"),),
    "founded": (("company.founded", "year"), ("university.founded", "year"), ("city.founded", "year")),
    "released": (("film.main", "year"),),
    "population": (("city.population", "pop"), ("country.population", "pop")),
}
FACT_KEY = {  # (type, relation/attribute) -> sentence key
    (t, rel): key
    for rel, pairs in RELATION_SENTENCES.items()
    for key, _ in pairs
    for t in range(6)
    if key.split(".")[0] == TYPE_NAMES[t]
}

# Noun phrases for the entity a relation leads to: "the founder of {}".
NOUN_PHRASES: dict[str, tuple[str, ...]] = {
    "director": ("the director of {}",),
    "founder": ("the founder of {}",),
    "hq": ("the city where {} is headquartered", "the headquarters city of {}"),
    "univ_city": ("the city where {} is located",),
    "birthplace": ("the birthplace of {}", "the city where {} was born"),
    "father": ("the father of {}",),
    "spouse": ("the spouse of {}",),
    "alma": ("the university attended by {}", "the alma mater of {}"),
    "country": ("the country where {} lies", "the country of {}"),
    "capital": ("the capital of {}",),
}
# Questions whose answer is the last relation's target or the attribute's value.
QUESTIONS: dict[str, tuple[str, ...]] = {
    "director": ("Who directed {}?", "Who is the director of {}?"),
    "founder": ("Who founded {}?", "Who is the founder of {}?"),
    "hq": ("Where is {} headquartered?", "In which city is {} headquartered?"),
    "univ_city": ("Where is {} located?", "In which city is {} located?"),
    "birthplace": ("Where was {} born?", "In which city was {} born?"),
    "father": ("Who is the father of {}?", "Who was the father of {}?"),
    "spouse": ("Who is the spouse of {}?", "Whom did {} marry?"),
    "alma": ("Where did {} study?", "Which university did {} attend?"),
    "country": ("In which country is {}?", "Which country is {} in?"),
    "capital": ("What is the capital of {}?",),
    "birth_year": ("When was {} born?", "In what year was {} born?"),
    "founded": ("When was {} founded?", "In which year was {} established?"),
    "released": ("When was {} released?", "In which year did {} come out?"),
    "population": ("What is the population of {}?", "How many people live in {}?"),
}
# The single sub-question an oracle decomposition uses per hop.
SUB_QUESTIONS: dict[str, str] = {rel: qs[0] for rel, qs in QUESTIONS.items()}
# The oracle's search keyword per (sentence key, relation), one per template of that sentence:
# a hop's query is "<entity name> <keyword of the phrasing its document uses>".
QUERY_WORDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("person.intro", "birth_year"): ("born", "born", "born"),
    ("person.birthplace", "birthplace"): ("born", "born", "birthplace"),
    ("person.father", "father"): ("{child}", "father", "father"),
    ("person.spouse", "spouse"): ("married", "spouse", "married"),
    ("person.alma", "alma"): ("studied", "graduated", "graduate"),
    ("company.intro", "hq"): ("headquartered", "based", "headquarters"),
    ("company.founded", "founder"): ("founded", "established", "founded"),
    ("company.founded", "founded"): ("founded", "established", "founded"),
    ("film.main", "director"): ("directed", "directed", "directed"),
    ("film.main", "released"): ("film", "released", "film"),
    ("city.main", "country"): ("city", "town", "lies"),
    ("city.founded", "founded"): ("founded", "established", "founded"),
    ("city.population", "population"): ("population", "live", "inhabitants"),
    ("country.main", "capital"): ("capital", "capital", "capital"),
    ("country.population", "population"): ("population", "home", "live"),
    ("university.main", "univ_city"): ("university", "located", "based"),
    ("university.founded", "founded"): ("founded", "established", "founded"),
}
# Comparisons: (attribute or relation, mode) -> template. mode: first/last (years), max/min
# (numbers), same (shared relation target -> yes/no).
COMPARISONS: dict[tuple[str, str], tuple[str, int]] = {
    # template, entity type compared
    ("founded", "first"): ("Which was founded first, {a} or {b}?", COMPANY),
    ("founded", "last"): ("Which was founded more recently, {a} or {b}?", COMPANY),
    ("birth_year", "first"): ("Who was born first, {a} or {b}?", PERSON),
    ("birth_year", "last"): ("Who was born later, {a} or {b}?", PERSON),
    ("released", "first"): ("Which film came out first, {a} or {b}?", FILM),
    ("released", "last"): ("Which film was released more recently, {a} or {b}?", FILM),
    ("population", "max"): ("Which city has the larger population, {a} or {b}?", CITY),
    ("population", "min"): ("Which city has fewer inhabitants, {a} or {b}?", CITY),
    ("birthplace", "same"): ("Were {a} and {b} born in the same city?", PERSON),
    ("hq", "same"): ("Are {a} and {b} headquartered in the same city?", COMPANY),
    ("country", "same"): ("Are {a} and {b} in the same country?", CITY),
}
# Bridge comparisons: (bridge relation, compared attribute/relation, mode, hops) -> template.
# With 4 hops both sides go through the bridge and the answer names a side ({a} or {b}); with 3
# hops only the left side does and the answer is a person (the bridge entity or {b}) or yes/no.
BRIDGE_COMPARISONS: dict[tuple[str, str, str, int], tuple[str, int]] = {
    ("director", "birth_year", "first", 4): (
        "Which film has the director who was born first, {a} or {b}?",
        FILM,
    ),
    ("director", "birth_year", "last", 4): (
        "Which film has the director who was born later, {a} or {b}?",
        FILM,
    ),
    ("founder", "birth_year", "first", 4): (
        "Which company has the founder who was born first, {a} or {b}?",
        COMPANY,
    ),
    ("founder", "birthplace", "same", 4): (
        "Were the founders of {a} and {b} born in the same city?",
        COMPANY,
    ),
    ("director", "birthplace", "same", 4): ("Were the directors of {a} and {b} born in the same city?", FILM),
    ("director", "birth_year", "first", 3): ("Who was born first, the director of {a} or {b}?", FILM),
    ("founder", "birth_year", "first", 3): ("Who was born first, the founder of {a} or {b}?", COMPANY),
    ("director", "birthplace", "same", 3): ("Was the director of {a} born in the same city as {b}?", FILM),
    ("founder", "birthplace", "same", 3): ("Was the founder of {a} born in the same city as {b}?", COMPANY),
}
# Inference: kinship relation names for chains of father/spouse links.
INFERENCES: dict[tuple[str, ...], str] = {
    ("father", "father"): "Who is the paternal grandfather of {}?",
    ("father", "spouse"): "Who is the mother of {}?",
    ("spouse", "father"): "Who is the father-in-law of {}?",
    ("father", "father", "father"): "Who is the paternal great-grandfather of {}?",
    ("father", "father", "spouse"): "Who is the paternal grandmother of {}?",
    ("spouse", "father", "father"): "Who is the grandfather-in-law of {}?",
    ("father", "father", "father", "father"): "Who is the paternal great-great-grandfather of {}?",
    ("father", "father", "father", "spouse"): "Who is the paternal great-grandmother of {}?",
}


# Cost per search of each source (read by cost rewards).
LOCAL_COST, WEB_COST = 0.0, 1.0
