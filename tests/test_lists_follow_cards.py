"""Every mechanism whose card declares a guarantee is in every list that checks one: the side-channel test, a meter,
the mutants, the audit. The lists are still kept by hand in their studies and tests; this test is what makes a missing
entry fail instead of silently leaving a new mechanism unchecked."""
import pytest
from dpmf_lit.model.cards import cards
from dpmf_lit.model.mechanism import mechanisms
from dpmf_lit.studies.audit import AUDITS
from dpmf_lit.studies.meter import METER, OBJECTIVE
from dpmf_lit.studies.meter_others import OTHERS
from dpmf_lit.studies.mutants import MUTANTS
from test_side_channel import GUARANTEED

CLAIMED = sorted(n for n, c in cards().items() if c.guaranteed is not None)


def _metered() -> set:
    "Names a meter reads: METER's and OBJECTIVE's keys, and OTHERS' readings by their first word ('gauss both' → gauss)."
    return set(METER) | set(OBJECTIVE) | {k.split()[0] for k in OTHERS}


def test_the_cards_declare_guarantees():
    "The check below has something to check: the papers' guaranteed mechanisms are on cards."
    assert {"dpals", "dpals-adaptive", "dp-bias", "hua", "sgld"} <= set(CLAIMED)


@pytest.mark.parametrize("name", CLAIMED)
def test_a_guaranteed_mechanism_is_in_every_list(name):
    missing = [what for what, ok in [("tests/test_side_channel.py GUARANTEED", name in GUARANTEED),
                                     ("a meter (studies.meter METER or OBJECTIVE, studies.meter_others OTHERS)", name in _metered()),
                                     ("studies.mutants MUTANTS", any(m.mechanism == name for m in MUTANTS)),
                                     ("studies.audit AUDITS (its card's audit)", name in AUDITS)] if not ok]
    assert not missing, f"{name} declares a guarantee on its card but is missing from: {'; '.join(missing)}"


def test_the_lists_name_registered_mechanisms():
    "A name in a list that is no registered mechanism is a typo or a leftover (its checks then check nothing)."
    known = set(mechanisms())
    assert GUARANTEED <= known, GUARANTEED - known
    assert {m.mechanism for m in MUTANTS} <= known, {m.mechanism for m in MUTANTS} - known
    assert set(METER) <= known and set(AUDITS) <= known, (set(METER) | set(AUDITS)) - known
