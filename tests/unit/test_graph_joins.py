"""When the graph signal joins hybrid's fusion (services/query/search.py, graph_joins)."""

from __future__ import annotations

from zapomni.services.query.entities import Named
from zapomni.services.query.search import graph_joins


def named(**mentions: int) -> Named:
    return Named(frozenset(mentions), frozenset(), mentions, {e: e for e in mentions})


def test_one_or_two_rare_entities_bring_the_graph_in():
    # 10,000 chunks: rare is in at most 50 of them
    assert graph_joins(named(a=3), 10_000)
    assert graph_joins(named(a=50, b=1), 10_000)
    assert graph_joins(named(a=3, common=4_000), 10_000)  # a common one does not count


def test_none_or_many_rare_entities_leave_it_out():
    assert not graph_joins(named(), 10_000)
    assert not graph_joins(named(common=51), 10_000)
    assert not graph_joins(named(a=1, b=2, c=3), 10_000)


def test_in_a_small_namespace_an_entity_of_one_or_two_chunks_is_rare():
    assert graph_joins(named(a=2), 3)
    assert not graph_joins(named(a=3), 30)
