"""The kernels' launch-table structs are generated from the numpy record dtypes (kernels/c_records.py,
cuda_c.records_header): their layout is the dtypes', a dtype edit reaches every build with no .cuh to
edit, the generated static_asserts refuse a struct that does not match, and a layout C cannot express
is refused with an L3Error."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from l3codec import ans_stage, batch, lz_stage
from l3codec.format import L3Error
from l3codec.kernels import cuda_c, emulation
from l3codec.kernels.c_records import c_struct

# int8, then int64 (7 bytes of padding), a 3 x int16 array, a 5-byte string, uint32 and a trailing
# float64 (no padding before it), bool and 7 bytes of trailing padding: every C type the generator writes
MIXED = np.dtype([("flag", "<i1"), ("count", "<u8"), ("shape", "<i2", (3,)), ("tag", "S5"), ("rank", "<u4"),
                  ("scale", "<f8"), ("valid", "?")], align=True)


def _task_with_priority() -> np.dtype:
    """TASK_DTYPE with an int32 field added: 4 bytes of trailing padding in C and in the aligned dtype."""
    wider = np.dtype(batch.TASK_DTYPE.descr + [("priority", "<i4")], align=True)
    assert wider.itemsize > batch.TASK_DTYPE.itemsize + 4  # the padding the struct must write
    return wider


def _gxx_check(text: str, tmp_path) -> subprocess.CompletedProcess:
    """g++ -fsyntax-only of `text`: the static_asserts are evaluated, nothing is built."""
    source = tmp_path / "probe.cpp"
    source.write_text(text)
    return subprocess.run([emulation.CXX, "-std=c++17", "-fsyntax-only", str(source)], capture_output=True,
                          text=True, check=False)


def test_the_kernels_records_are_the_batch_dtypes():
    records = cuda_c.kernel_records()
    assert {name: dtype for name, (dtype, _) in records.items()} == {
        "L3Item": batch.ITEM_DTYPE, "L3Task": batch.TASK_DTYPE, "L3Expansion": lz_stage.EXPANSION_DTYPE,
        "L3AnsTable": ans_stage.TABLE_STAGE_DTYPE}
    assert [origin for _, origin in records.values()] == [
        "batch.ITEM_DTYPE", "batch.TASK_DTYPE", "lz_stage.EXPANSION_DTYPE", "ans_stage.TABLE_STAGE_DTYPE"]


def test_no_kernel_source_writes_a_record_struct_by_hand():
    declared = {}
    for path in cuda_c.KERNEL_DIR.glob("*.cu*"):
        text = re.sub(r"//[^\n]*", "", path.read_text())
        found = [name for name in cuda_c.kernel_records() if re.search(rf"\bstruct\s+{name}\b", text)]
        if found:
            declared[path.name] = found
    assert not declared, f"declared by hand: {declared}; they come from {cuda_c.RECORDS_HEADER}"


def test_every_kernel_source_gets_each_struct_once_from_the_dtypes():
    for name in cuda_c.SOURCES:
        text = cuda_c.source_text(name)
        for struct, (dtype, origin) in cuda_c.kernel_records().items():
            assert text.count(f"struct {struct} {{") == 1, (name, struct)
            assert c_struct(struct, dtype, origin) in text, (name, struct)


@pytest.mark.emulator
def test_the_emulated_kernels_compile_the_dtypes_layout():
    """What g++ made of the generated structs in the emulated kernels' build: each dtype's itemsize
    and field offsets, field for field (the build's static_asserts say so too; this reads them back)."""
    want = {name: (dtype.itemsize, {field: dtype.fields[field][1] for field in dtype.names})
            for name, (dtype, _) in cuda_c.kernel_records().items()}
    assert emulation.record_layouts() == want


def test_c_struct_writes_padding_arrays_and_byte_strings(tmp_path):
    text = c_struct("Mixed", MIXED, "test.MIXED")
    members = re.search(r"struct Mixed \{\n(.*?)\n\};", text, re.DOTALL).group(1).splitlines()
    assert [line.strip() for line in members] == [
        "signed char flag;", "unsigned char padding_at_1[7];", "unsigned long long count;", "short shape[3];",
        "char tag[5];", "unsigned char padding_at_27[1];", "unsigned int rank;", "double scale;",
        "bool valid;", "unsigned char padding_at_41[7];"]
    assert f"sizeof(Mixed) == {MIXED.itemsize}" in text
    assert len(re.findall(r"__builtin_offsetof\(Mixed, \w+\) == \d+", text)) == len(MIXED.names)
    if shutil.which(emulation.CXX) is None:
        pytest.skip(f"{emulation.CXX} is not installed")
    result = _gxx_check(text, tmp_path)
    assert result.returncode == 0, result.stderr  # the compiler's layout is the dtype's


def test_the_generated_static_asserts_refuse_a_struct_off_its_dtype(tmp_path):
    if shutil.which(emulation.CXX) is None:
        pytest.skip(f"{emulation.CXX} is not installed")
    text = c_struct("Mixed", MIXED, "test.MIXED")
    narrowed = text.replace("double scale;", "float scale;")  # valid moves 4 bytes down, the size stays
    result = _gxx_check(narrowed, tmp_path)
    assert result.returncode != 0 and "Mixed.valid: its offset in test.MIXED" in result.stderr
    assert "Mixed.scale" not in result.stderr and "the itemsize of test.MIXED" not in result.stderr
    swapped = text.replace("    short shape[3];\n    char tag[5];", "    char tag[5];\n    short shape[3];")
    result = _gxx_check(swapped, tmp_path)
    assert result.returncode != 0
    assert "Mixed.shape: its offset" in result.stderr and "Mixed.tag: its offset" in result.stderr


@pytest.mark.parametrize("dtype, message", [
    (np.dtype([("a", ">i8")]), "big-endian"),
    (np.dtype([("a", "<i1"), ("b", "<i8")]), "not aligned to its C alignment 8"),
    (np.dtype([("a", "<i8"), ("b", "<i1")]), "not a multiple of its C alignment 8"),
    (np.dtype({"names": ["a", "b"], "formats": ["<i8", "<i4"], "offsets": [0, 4], "itemsize": 16}),
     "overlaps"),
    (np.dtype([("a", "O")]), "no C type"),
    (np.dtype([("a", "<f2")]), "no C type"),
    (np.dtype([("a", [("b", "<i8")])]), "nested record"),
    (np.dtype([("not C", "<i8")]), "not a C identifier"),
    (np.dtype([("padding_at_0", "<i8")]), "padding member"),
    (np.dtype([("new", "<i8")]), "not a C identifier"),  # a C++ keyword
    (np.dtype([("a", "S0"), ("b", "<i8")]), "no bytes"),
    (np.dtype("<i8"), "not a record dtype"),
])
def test_c_struct_refuses_layouts_c_cannot_express(dtype, message):
    with pytest.raises(L3Error, match=message):
        c_struct("Refused", dtype, "test.REFUSED")


def test_a_dtype_edit_reaches_the_compiled_source(monkeypatch):
    """The sources NVRTC and CuPy get follow the dtype (CuPy keys its cache on that text)."""
    before = cuda_c.source_text("compact.cu")
    wider = _task_with_priority()
    monkeypatch.setattr(batch, "TASK_DTYPE", wider)
    after = cuda_c.source_text("compact.cu")
    assert after != before and "    int priority;\n    unsigned char padding_at_36[4];\n" in after
    assert f"sizeof(L3Task) == {wider.itemsize}" in after


@pytest.mark.emulator
def test_a_dtype_edit_reaches_the_emulation_build(monkeypatch, tmp_path):
    """build_library writes the generated headers of the dtypes it is called with (and keys its cache on
    them): a unit built against an edited TASK_DTYPE sees the edited struct."""
    monkeypatch.setenv("L3_EMULATION_CACHE", str(tmp_path))
    probe = ('#include "l3_records.cuh"\n'
             'extern "C" long long task_layout(int what) {\n'
             '    return what == 0 ? (long long)sizeof(L3Task)\n'
             '                     : (long long)__builtin_offsetof(L3Task, priority);\n'
             '}\n')
    wider = _task_with_priority()
    monkeypatch.setattr(batch, "TASK_DTYPE", wider)
    lib = emulation.build_library("layout_probe", [], {"probe.cpp": probe})
    assert (lib.task_layout(0), lib.task_layout(1)) == (wider.itemsize, wider.fields["priority"][1])


@pytest.mark.compile
def test_nvrtc_checks_the_generated_layout(tmp_path, monkeypatch):
    """NVRTC compiles a padded mixed record's struct and its static_asserts (__builtin_offsetof included),
    and refuses the struct once it is off its dtype, naming the field."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")
    (tmp_path / "probe.cu").write_text(
        f'#include "{cuda_c.RECORDS_HEADER}"\n'
        'extern "C" __global__ void probe(L3Task* tasks) { tasks[threadIdx.x].priority = sizeof(L3Item); }\n')
    monkeypatch.setattr(cuda_c, "KERNEL_DIR", tmp_path)
    monkeypatch.setattr(batch, "TASK_DTYPE", _task_with_priority())
    cubin, _ = cuda_c.nvrtc_compile("probe.cu", "sm_80")
    assert cubin
    header = cuda_c.records_header()
    monkeypatch.setitem(cuda_c.GENERATED_HEADERS, cuda_c.RECORDS_HEADER,
                        lambda: header.replace("    long long tile_y;\n", "    long long tile_y[2];\n", 1))
    with pytest.raises(RuntimeError, match="L3Task.tile_x: its offset in batch.TASK_DTYPE"):
        cuda_c.nvrtc_compile("probe.cu", "sm_80")
