"""The budget: windows, reserves, shares and their water-filling, the tracker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextwright import Budget, BudgetTracker, ConfigError, model_info, share_out


def test_total_and_window():
    assert Budget(8000).input_tokens == 8000
    assert Budget(window=128_000, reserve_output=4096).input_tokens == 123_904
    assert Budget(total=1000, window=128_000, reserve_output=4096).input_tokens == 1000


def test_model_registry_longest_prefix():
    assert model_info("gpt-4o-mini-2024-07-18").name == "gpt-4o-mini"
    assert model_info("gpt-4-0613").context_window == 8192
    assert Budget.for_model("gpt-4o").input_tokens == 128_000 - 4096
    with pytest.raises(ConfigError, match="unknown model"):
        model_info("llama-99")


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"total": 0},
        {"total": -5},
        {"total": 1.5},
        {"window": 100, "reserve_output": 100},
        {"total": 10, "reserve_output": -1},
        {"total": 10, "shares": {"nonsense": 0.5}},
        {"total": 10, "shares": {"recent": -1}},
        {"total": 10, "shares": {"recent": 0}},
    ],
)
def test_bad_budgets(kwargs):
    with pytest.raises(ConfigError):
        Budget(**kwargs)


def test_seed_default_shares():
    w = Budget(1000).weights()
    assert w == pytest.approx(
        {"system": 0.2, "summary": 0.1, "retrieved": 0.1, "recent": 0.55, "input": 0.05}
    )


def test_unused_share_flows_to_others():
    weights = {"a": 0.5, "b": 0.25, "c": 0.25}
    got = share_out(100, {"a": 10, "b": 1000, "c": 1000}, weights)
    assert got["a"] == 10
    assert got["b"] == got["c"] == 45


@given(
    st.integers(0, 10_000),
    st.dictionaries(st.sampled_from("abcde"), st.integers(0, 5000), min_size=1),
    st.dictionaries(st.sampled_from("abcde"), st.floats(0, 1), min_size=1),
)
def test_share_out_invariants(amount, demands, weights):
    got = share_out(amount, demands, weights)
    assert sum(got.values()) <= amount
    for k, v in got.items():
        assert 0 <= v <= demands[k]
    # nothing is left unused while someone still wants more
    if sum(demands.values()) >= amount:
        assert sum(got.values()) >= amount - len(demands)
    else:
        assert got == demands


def test_tracker_records_everything():
    t = BudgetTracker(100)
    assert t.allocate("system", "prompt", 60)
    assert not t.allocate("recent", "unit-1", 50)
    assert t.allocate("recent", "unit-2", 40)
    assert t.remaining == 0
    assert [a.granted for a in t.ledger] == [True, False, True]
    assert "needs 50, 40 left" in t.ledger[1].reason
    t.release("recent", "unit-2", 40)
    assert t.used == 60
