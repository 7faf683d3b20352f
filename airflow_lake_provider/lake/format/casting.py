"""Casts that keep every value exactly, or refuse: the one way batches and files are shaped to a schema.

Arrow's own casts lose values silently in places (float64 -> float32 turns ``1e300`` into ``inf`` and
``0.1`` into ``0.10000000149``; a "safe" cast does not check float narrowing). Here every leaf cast
is checked by casting back: a value that does not come back unchanged is refused, naming the column
and the value. Struct, list and map columns are cast child by child, so nested leaves get the same
check and nested field names (parquet's ``element`` vs Avro's ``item``) or nullability may differ.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.errors import SchemaError


def is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def is_nested(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) or pa.types.is_map(t) or is_list(t)


def same_shape(got: pa.DataType, want: pa.DataType, leaf_ok: Any) -> bool:
    """Whether ``got`` has ``want``'s nesting (struct fields by name) and ``leaf_ok(got, want)`` holds
    for every pair of leaf types; names of list items and map entries do not matter."""
    if got == want:
        return True
    if pa.types.is_struct(want):
        if not pa.types.is_struct(got) or sorted(f.name for f in got) != sorted(f.name for f in want):
            return False
        return all(same_shape(got.field(f.name).type, f.type, leaf_ok) for f in want)
    if pa.types.is_map(want):
        return (
            pa.types.is_map(got)
            and same_shape(got.key_type, want.key_type, leaf_ok)
            and same_shape(got.item_type, want.item_type, leaf_ok)
        )
    if is_list(want):
        return is_list(got) and same_shape(got.value_type, want.value_type, leaf_ok)
    return not is_nested(got) and bool(leaf_ok(got, want))


def cast_exact(column: pa.Array | pa.ChunkedArray, target: pa.DataType, name: str) -> pa.ChunkedArray:
    """``column`` as ``target``, every value unchanged.

    :raises SchemaError: naming ``name`` (the column path) and the first value that would change,
        or the types when Arrow cannot cast one to the other at all.
    """
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if column.type == target:
        return column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column])
    return pa.chunked_array([_cast(chunk, target, name) for chunk in chunks], type=target)


def _cast(arr: pa.Array, target: pa.DataType, path: str) -> pa.Array:
    if arr.type == target:
        return arr
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(target) and pa.types.is_struct(arr.type):
        names = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
        unknown = sorted(set(names) - {f.name for f in target})
        if unknown:
            raise SchemaError(f"column {path!r} has field(s) {unknown} that the table does not store")
        # flatten() folds the parent's nulls into each child, so no garbage under a null parent is checked.
        flat = arr.flatten()
        children = [
            _cast(flat[names[f.name]], f.type, f"{path}.{f.name}")
            if f.name in names
            else pa.nulls(len(arr), f.type)
            for f in target
        ]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_map(target) and pa.types.is_map(arr.type):
        offsets, start, count = _rebased_offsets(arr)
        keys = _cast(arr.keys.slice(start, count), target.key_type, f"{path}.key")
        items = _cast(arr.items.slice(start, count), target.item_type, f"{path}.value")
        return pa.MapArray.from_arrays(offsets, keys, items, type=target, mask=mask)
    if is_list(target) and is_list(arr.type):
        offsets, start, count = _rebased_offsets(arr)
        values = _cast(arr.values.slice(start, count), target.value_type, f"{path}[]")
        kind = pa.LargeListArray if pa.types.is_large_list(target) else pa.ListArray
        return kind.from_arrays(offsets.cast(_offset_type(target)), values, type=target, mask=mask)
    if is_nested(target) or is_nested(arr.type):
        raise SchemaError(f"column {path!r} has type {arr.type}, the table stores {target}")
    return _cast_leaf(arr, target, path)


def _offset_type(t: pa.DataType) -> pa.DataType:
    return pa.int64() if pa.types.is_large_list(t) else pa.int32()


def _rebased_offsets(arr: pa.Array) -> tuple[pa.Array, int, int]:
    """Offsets of a (possibly sliced) list or map array starting at 0, and the child range they cover."""
    offsets = arr.offsets
    start = offsets[0].as_py()
    count = offsets[len(offsets) - 1].as_py() - start
    if start:
        offsets = pc.subtract(offsets, pa.scalar(start, offsets.type))
    return offsets, start, count


def _cast_leaf(arr: pa.Array, target: pa.DataType, path: str) -> pa.Array:
    try:
        out = arr.cast(target, safe=False)
        back = out.cast(arr.type, safe=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaError(f"column {path!r}: cannot cast {arr.type} to {target}: {exc}") from exc
    same = pc.equal(back, arr)
    if pa.types.is_floating(arr.type):
        same = pc.or_kleene(same, pc.and_(pc.is_nan(arr), pc.is_nan(back)))
    # Nulls stay nulls in every cast, so a null comparison is a null on both sides.
    changed = pc.invert(pc.fill_null(same, True))
    if pc.any(changed).as_py():
        i = pc.index(changed, True).as_py()
        raise SchemaError(
            f"column {path!r}: value {_shown(arr[i])} does not fit {target} exactly "
            f"(it would become {_shown(out[i])}); cast the column yourself if that is intended"
        )
    return out


def _shown(value: pa.Scalar) -> str:
    """A value for an error message. A nanosecond timestamp's ``as_py()`` needs pandas (not a
    dependency) once it is not whole microseconds; Arrow's own text then names it."""
    try:
        return repr(value.as_py())
    except ValueError:
        return repr(value.cast(pa.string()).as_py())
