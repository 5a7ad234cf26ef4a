"""C structs from numpy record dtypes, so that a table the host fills and a kernel reads is defined once.

The launch tables (batch.ITEM_DTYPE, batch.TASK_DTYPE, lz_stage.EXPANSION_DTYPE) are little-endian numpy
dtypes; :func:`c_struct` writes the struct a kernel indexes them with: the dtype's fields in offset order,
under their own names, in the C type of their kind and size, with an explicit padding member wherever the
dtype leaves a gap, and static_asserts of sizeof and of every field's offsetof, so that a compiler
(NVRTC or the emulation's g++) refuses a struct that does not lay out as the dtype does. A layout C
cannot express (a big-endian or misaligned field, a kind with no C type) raises L3Error.
"""

from __future__ import annotations

import re

import numpy as np

from l3codec.format import L3Error

# (kind, itemsize) -> C type; a scalar's C alignment is its size, a byte string's 1
_SCALAR_TYPES = {
    ("i", 1): "signed char", ("i", 2): "short", ("i", 4): "int", ("i", 8): "long long",
    ("u", 1): "unsigned char", ("u", 2): "unsigned short", ("u", 4): "unsigned int",
    ("u", 8): "unsigned long long",
    ("f", 4): "float", ("f", 8): "double",
    ("b", 1): "bool",
}
_BYTE_TYPES = {"S": "char", "V": "unsigned char"}  # fixed-size byte strings: arrays of bytes
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# names a C++ compiler (NVRTC, g++) refuses for a member though _IDENTIFIER matches them
_RESERVED = frozenset("""alignas alignof asm auto bool break case catch char char16_t char32_t class const
    constexpr const_cast continue decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept nullptr operator
    private protected public register reinterpret_cast return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid typename union
    unsigned using virtual void volatile wchar_t while""".split())
PADDING_PREFIX = "padding_at_"  # padding members are named by their offset: padding_at_12


def _c_type(base: np.dtype, where: str) -> tuple:
    """(C element type, extra array dimension or None, C alignment) of a field's base dtype."""
    if base.str[0] == ">":
        raise L3Error(f"{where} is big-endian ({base.str}): the kernels read little-endian records")
    if base.names is not None or base.subdtype is not None:
        raise L3Error(f"{where} is a nested record ({base}): flatten it into the record's own fields")
    if (base.kind, base.itemsize) in _SCALAR_TYPES:
        return _SCALAR_TYPES[base.kind, base.itemsize], None, base.itemsize
    if base.kind in _BYTE_TYPES:
        if base.itemsize == 0:
            raise L3Error(f"{where} has no bytes ({base.str}): C has no zero-length member")
        return _BYTE_TYPES[base.kind], base.itemsize, 1
    raise L3Error(f"{where} has dtype {base.str}, which has no C type for the kernels")


def c_struct(name: str, dtype, origin: str) -> str:
    """The C struct `name` with the layout of the numpy record dtype, followed by its static_asserts;
    `origin` (e.g. "batch.ITEM_DTYPE") names the dtype in the comment and the assert messages."""
    dtype = np.dtype(dtype)
    if not _IDENTIFIER.match(name):
        raise L3Error(f"{name!r} is not a C identifier")
    if dtype.names is None:
        raise L3Error(f"{origin} is not a record dtype ({dtype})")
    fields = sorted((dtype.fields[field][1], field, dtype.fields[field][0]) for field in dtype.names)
    members, end, alignment = [], 0, 1
    for offset, field, field_dtype in fields:
        where = f"{origin} field {field!r}"
        if not _IDENTIFIER.match(field) or field in _RESERVED or field.startswith(PADDING_PREFIX):
            raise L3Error(f"{where}: not a C identifier, or a generated padding member's name")
        if offset < end:
            raise L3Error(f"{where} at byte {offset} overlaps the field before it (which ends at {end})")
        base, shape = field_dtype.subdtype or (field_dtype, ())
        c_type, byte_count, field_alignment = _c_type(base, where)
        if offset % field_alignment:
            raise L3Error(f"{where} at byte {offset} is not aligned to its C alignment {field_alignment}:"
                          " a C struct cannot put it there")
        if offset > end:
            members.append(f"    unsigned char {PADDING_PREFIX}{end}[{offset - end}];")
        dimensions = "".join(f"[{n}]" for n in (*shape, *([byte_count] if byte_count else [])))
        members.append(f"    {c_type} {field}{dimensions};")
        end, alignment = offset + field_dtype.itemsize, max(alignment, field_alignment)
    if dtype.itemsize % alignment:
        raise L3Error(f"{origin} has {dtype.itemsize} bytes, not a multiple of its C alignment {alignment}:"
                      " pad the dtype (np.dtype(..., align=True) or a trailing field)")
    if dtype.itemsize > end:
        members.append(f"    unsigned char {PADDING_PREFIX}{end}[{dtype.itemsize - end}];")
    lines = [f"// {origin}: {len(fields)} fields, {dtype.itemsize} bytes", f"struct {name} {{", *members, "};",
             f'static_assert(sizeof({name}) == {dtype.itemsize}, "{name}: the itemsize of {origin}");']
    lines += [f'static_assert(__builtin_offsetof({name}, {field}) == {offset}, '
              f'"{name}.{field}: its offset in {origin}");' for offset, field, _ in fields]
    return "\n".join(lines)
