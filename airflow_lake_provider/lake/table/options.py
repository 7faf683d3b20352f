"""Reading service options: layered string maps (table properties, then the caller's) with typed,
checked values. Errors name the key and the value."""

from __future__ import annotations

from collections.abc import Mapping

from airflow_lake_provider.lake.errors import LakeError

Keys = str | tuple[str, ...]


def merge_layers(*layers: Mapping[str, object]) -> dict[str, object]:
    """Later layers override earlier ones; ``None`` values do not override."""
    merged: dict[str, object] = {}
    for layer in layers:
        merged.update({k: v for k, v in layer.items() if v is not None})
    return merged


def lookup(options: Mapping[str, object], keys: Keys) -> tuple[str, str] | None:
    """The first of ``keys`` set to a non-blank value, with that value stripped."""
    for key in (keys,) if isinstance(keys, str) else keys:
        value = options.get(key)
        if value is not None and str(value).strip() != "":
            return key, str(value).strip()
    return None


def get_str(options: Mapping[str, object], keys: Keys) -> str | None:
    found = lookup(options, keys)
    return found[1] if found else None


# Hudi reads its integer options as Java ints: a larger value is refused there, and here.
JAVA_INT_MAX = 2**31 - 1


def get_int(
    options: Mapping[str, object],
    keys: Keys,
    default: int,
    minimum: int,
    error: type[LakeError],
    maximum: int | None = None,
) -> int:
    found = lookup(options, keys)
    if found is None:
        return default
    key, raw = found
    try:
        value = int(raw)
    except ValueError:
        raise error(f"{key}={raw!r} is not a whole number") from None
    if value < minimum:
        raise error(f"{key}={value} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise error(f"{key}={value} must be at most {maximum}")
    return value


def get_float(
    options: Mapping[str, object], keys: Keys, default: float, minimum: float, error: type[LakeError]
) -> float:
    found = lookup(options, keys)
    if found is None:
        return default
    key, raw = found
    try:
        value = float(raw)
    except ValueError:
        raise error(f"{key}={raw!r} is not a number") from None
    if not value >= minimum:  # also refuses NaN
        raise error(f"{key}={raw} must be a number of at least {minimum}")
    return value


def get_bool(options: Mapping[str, object], keys: Keys, default: bool, error: type[LakeError]) -> bool:
    found = lookup(options, keys)
    if found is None:
        return default
    key, raw = found
    if raw.lower() not in ("true", "false"):
        raise error(f"{key}={raw!r} is not true or false")
    return raw.lower() == "true"
