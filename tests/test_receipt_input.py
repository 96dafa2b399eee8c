"""`record_receipt` refuses bad input the same way on every backend, and stores nothing then."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from contextwright import ConfigError, InvalidMessageError

from .conftest import OpenBackend, sync

BAD = [
    ({"receipt": ["not", "a", "mapping"]}, "receipt"),
    ({"receipt": {"x": {1, 2}}}, "receipt"),
    ({"keep": 0}, "keep"),
    ({"keep": True}, "keep"),
    ({"at": math.inf}, "at"),
    ({"at": "yesterday"}, "at"),
]


@pytest.mark.parametrize(("change", "where"), BAD)
def test_bad_receipt_input_names_the_field_and_stores_nothing(
    tmp_path: Path, backend: OpenBackend, change: dict[str, object], where: str
) -> None:
    receipts = sync(backend(tmp_path / "r.db").receipts)
    args: dict[str, object] = {"conversation": "c", "receipt": {"n": 1}, "keep": 5, "at": 10.0}
    args.update(change)
    conversation = args.pop("conversation")
    receipt = args.pop("receipt")
    with pytest.raises(InvalidMessageError) as err:
        receipts.record_receipt(conversation, receipt, tenant="t", **args)
    assert err.value.where == where
    assert receipts.receipts("c", tenant="t") == []
    with pytest.raises(ConfigError, match="conversation must be a non-empty string"):
        receipts.record_receipt("", {"n": 1}, tenant="t")
    good = receipts.record_receipt("c", {"n": 2}, tenant="t", keep=5, at=10.0)
    assert (good.at, receipts.receipts("c", tenant="t")[0].receipt) == (10.0, {"n": 2})
