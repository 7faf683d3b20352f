"""The registry's checked parsers (``config.checked``): each value on its own as the service reading it
checks it, at the bounds; what they return is what the services read."""

from __future__ import annotations

import pytest

from airflow_lake_provider.lake.config import checked
from airflow_lake_provider.lake.config.values import PolicyKind
from airflow_lake_provider.lake.errors import ConfigError, WriteConfigError


def _refusal(parse, raw: str) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(WriteConfigError) as refused:
        parse("k", raw, WriteConfigError)
    return str(refused.value)


def test_bloom_sizes_are_positive_java_ints() -> None:
    assert checked.bloom_entries("k", "1", WriteConfigError) == 1
    assert checked.bloom_entries("k", "2147483647", WriteConfigError) == 2**31 - 1
    assert _refusal(checked.bloom_entries, "0") == "k must be positive, got 0"
    assert _refusal(checked.bloom_entries, "2147483648") == "k must be at most 2147483647, got 2147483648"
    assert _refusal(checked.bloom_entries, "1.5") == "k='1.5' is not a whole number"
    # The dynamic filter's ceiling may be 0 or less (Hudi reads it as a plain int); not above a Java int.
    assert checked.bloom_max_entries("k", "0", WriteConfigError) == 0
    assert _refusal(checked.bloom_max_entries, "2147483648") == "k must be at most 2147483647, got 2147483648"


def test_a_bloom_false_positive_rate_lies_strictly_between_0_and_1() -> None:
    assert checked.bloom_fpp("k", "0.5", WriteConfigError) == 0.5
    assert checked.bloom_fpp("k", "1e-9", WriteConfigError) == 1e-9
    assert [_refusal(checked.bloom_fpp, raw) for raw in ("0", "1", "-0.1", "NaN")] == [
        "k must be in (0, 1), got 0.0",
        "k must be in (0, 1), got 1.0",
        "k must be in (0, 1), got -0.1",
        "k must be in (0, 1), got nan",
    ]


def test_a_bloom_filter_type_is_read_in_any_case() -> None:
    assert checked.bloom_filter_type("k", "simple", WriteConfigError) == "SIMPLE"
    assert checked.bloom_filter_type("k", "Dynamic_V0", WriteConfigError) == "DYNAMIC_V0"
    assert _refusal(checked.bloom_filter_type, "dynamic") == "k must be SIMPLE or DYNAMIC_V0, got 'DYNAMIC'"


def test_policies_keep_their_order_once_each() -> None:
    assert checked.policy_kinds("k", " Metastore, success-file,metastore ,", ConfigError) == (
        PolicyKind.METASTORE,
        PolicyKind.SUCCESS_FILE,
    )
    assert checked.policies("k", "custom", ConfigError) == "custom"
    with pytest.raises(ConfigError, match="^k=' , ' names no policy$"):
        checked.policies("k", " , ", ConfigError)


def test_compaction_strategies_are_named_by_class_or_short_form() -> None:
    name = "org.apache.hudi.table.action.compact.strategy.LogFileSizeBasedCompactionStrategy"
    assert checked.strategy_kinds("k", f"{name}, day_based ,log_file_count", ConfigError) == [
        "logfilesize",
        "day",
        "logfilenum",
    ]
    assert checked.strategies("k", name, ConfigError) == name
    with pytest.raises(ConfigError, match="^k=',' names no strategy$"):
        checked.strategies("k", ",", ConfigError)


def test_an_extractor_kind_is_default_or_custom_in_any_case() -> None:
    assert checked.extractor_kind("k", "CUSTOM", ConfigError) == "custom"
    assert checked.extractor_kind("k", "default", ConfigError) == "default"
    with pytest.raises(ConfigError, match="^k='regex' is not default or custom$"):
        checked.extractor_kind("k", "Regex", ConfigError)


def test_a_time_zone_is_one_the_zone_database_knows() -> None:
    assert checked.time_zone("k", "Europe/Berlin", ConfigError) == "Europe/Berlin"
    for raw in ("Mars/Phobos", "../etc/passwd", "Europe/", "Etc", "America", "x" * 300):
        with pytest.raises(ConfigError, match=f"^k='{raw}' is not a known time zone$"):
            checked.time_zone("k", raw, ConfigError)


def test_two_names_of_policies_or_strategies_agree_by_what_they_name() -> None:
    """A flag and an option (or an alias) compare by the kinds they name, not as text; the order of
    policies is part of it (they are applied in that order)."""
    from airflow_lake_provider.lake.config.registry import COMPACTION_STRATEGY, PC_POLICY_KIND

    full = "org.apache.hudi.table.action.compact.strategy.LogFileSizeBasedCompactionStrategy"
    assert COMPACTION_STRATEGY.same(("--strategy", "LogFileSizeBasedCompactionStrategy"), ("k", full))
    assert not COMPACTION_STRATEGY.same(("--strategy", "BoundedIO"), ("k", full))
    assert PC_POLICY_KIND.same(("--policy", "SUCCESS-FILE"), ("k", "success-file"))
    assert PC_POLICY_KIND.same(("policies", "success-file,metastore"), ("k", " success-file, metastore "))
    assert not PC_POLICY_KIND.same(("policies", "metastore,success-file"), ("k", "success-file,metastore"))


def test_a_time_formatter_is_java_letters_each_field_once() -> None:
    assert checked.strptime_format("k", "yyyy-MM-dd HH:mm:ss%", WriteConfigError) == "%Y-%m-%d %H:%M:%S%%"
    assert checked.time_formatter("k", "yyyyMMdd", WriteConfigError) == "yyyyMMdd"
    assert (
        _refusal(checked.time_formatter, "MM MM") == "k='MM MM': pattern field 'MM' is given more than once"
    )
    assert _refusal(checked.time_formatter, "yyyyyyyy") == (
        "k='yyyyyyyy': pattern field 'yyyy' is given more than once"
    )
    assert _refusal(checked.time_formatter, "QQ") == (
        "k='QQ': pattern letter 'Q' is not supported (use yyyy, MM, dd, HH, mm, ss)"
    )


def test_a_regex_re_cannot_compile_is_refused_naming_it() -> None:
    from airflow_lake_provider.lake.config.parsers import regex

    assert regex("k", "a+", WriteConfigError) == "a+"
    assert (
        _refusal(regex, "(") == "k='(' is not a valid regex: missing ), unterminated subpattern at position 0"
    )
    too_deep = "(" * 2000 + ")" * 2000
    with pytest.raises(WriteConfigError) as refused:
        regex("k", too_deep, WriteConfigError)
    assert str(refused.value).endswith("is not a regex this engine can compile (too large or too deep)")


def test_a_whole_number_past_any_java_type_is_refused_not_a_raw_error() -> None:
    """``int()`` refuses strings of over 4,300 digits with a ValueError of its own."""
    from airflow_lake_provider.lake.config.parsers import integer, whole_number

    assert whole_number("+" + "0" * 39 + "7") == 7
    assert whole_number("9" * 41) is None
    assert whole_number("\u00b2") is None
    assert _refusal(integer(1), "9" * 5000) == f"k={'9' * 5000!r} is not a whole number"
