"""One rule for "is this resourceVersion an integer" (:func:`common.versions.is_integer_version`).

Before issue 36 the rule was written six times: three copies checked ``isascii() and
isdigit()`` (``common/deltas.py``, ``reflector_svc/moves.py``, ``reflector_svc/publisher.py``),
three only ``isdigit()`` (``reflector_svc/reflector.py``, ``processor_svc/write_barrier.py``,
``informer_bus/status/collect.py``). They disagreed on non-ASCII digits. The publish script,
running in Redis, is the source of truth for what a shard knows, and it compares two versions
as integers only when both match Lua's ``^%d+$``: ASCII digits. So the ASCII copies were right,
and the others were wrong twice over: they took a superscript two (``"\\u00b2"``), which
``int()`` then refuses (the reflector's ``max(candidates, key=int)`` raised), and fullwidth
digits (``"\\uff11\\uff12"``), which ``int()`` reads as 12 (the write barrier took them for
the integer 12, which the shards never do).
"""

from __future__ import annotations

import pytest
import redis

from common.redis_layout.publish_scripts import _LUA_DIGITS
from common.versions import compare_resource_versions, is_integer_version

# (version, the isdigit()-only copies' answer, the right answer)
CASES = [
    ("12", True, True),
    ("007", True, True),
    ("", False, False),
    ("-1", False, False),
    ("1.0", False, False),
    (" 1", False, False),
    ("abc", False, False),
    ("\uff11\uff12", True, False),  # fullwidth digits: int() reads 12
    ("\u0663", True, False),  # ARABIC-INDIC DIGIT THREE: int() reads 3
    ("\u00b2", True, False),  # SUPERSCRIPT TWO: isdigit() but int() raises
]
DISAGREEING = [version for version, old, right in CASES if old != right]


@pytest.mark.parametrize(("version", "isdigit_only", "right"), CASES)
def test_the_rule_and_the_copies_that_drifted(
    version: str, isdigit_only: bool, right: bool
) -> None:
    assert version.isdigit() is isdigit_only
    assert is_integer_version(version) is right


def test_the_publish_script_in_redis_takes_the_same_versions_as_integers(
    redis_client: redis.Redis,
) -> None:
    script = _LUA_DIGITS.replace("$$", "$") + "\nreturn digits(ARGV[1]) and 1 or 0"
    for version, _, right in CASES:
        assert redis_client.eval(script, 0, version) == int(right), version


def test_versions_the_isdigit_copies_took_are_not_integers() -> None:
    with pytest.raises(ValueError, match="invalid literal"):
        int("\u00b2")  # what the reflector's max(..., key=int) met through the isdigit()-only copy
    assert int("\uff11\uff12") == 12  # what the write barrier compared as 12
    for version in DISAGREEING:
        assert compare_resource_versions(version, "12") is None
        assert compare_resource_versions(version, version) == 0  # equal text stays equal
