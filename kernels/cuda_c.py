"""The CUDA C decoders (kernels/compact.cu, kernels/fast.cu, and kernels/lz.cu, which expands LZ
streams before them): build, launch geometry, launch, ptxas report.

Launch ABI (both kernels; each decodes 8- and 16-bit items)::

    kernel(const uint8* data, int64 data_size, const int64* stream_starts, const int64* stream_ends,
           const L3Item* items, const L3Task* tasks, int64 task_count, uint8* out, int32* status)

with the tables of ``l3codec.batch.prepare`` (L3Item/L3Task: structs generated from ITEM_DTYPE/TASK_DTYPE,
see below), gridDim.x = task_count, blockDim = :func:`block_shape`, dynamic
shared memory = :func:`shared_memory_bytes`, status zeroed by the host (one int32 per
item of the launch; it ends as batch.status_key of the item's first failing stream, or 0).
``data`` at an 8-byte aligned address takes the word load path (any address works, slower);
``out`` must be 2-byte aligned when the launch holds 16-bit items.

The constants the kernels share with the Python codec are not written in the .cu files: they come
from l3codec's modules (and, for the kernels' own layout and launch sizes, from this module) through
a header generated at compile time, :data:`CONSTANTS_HEADER` (:func:`constants_header`). Nor are the
structs of the launch tables: :data:`RECORDS_HEADER` (:func:`records_header`) writes them from the numpy
record dtypes (kernels/c_records.py). :func:`source_text` inlines both for NVRTC and
kernels/emulation.py writes both beside its g++ build (:data:`GENERATED_HEADERS`).

This module imports without cupy; cupy is imported inside the functions that need it, and
:func:`compile_report` needs only ``cuda.bindings`` (NVRTC).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from l3codec import ans, ans_stage, batch, compact, fast, huffman, lz4block, lz_stage, streams
from l3codec import format as fmt
from l3codec.format import MODE_COMPACT, MODE_FAST

from .c_records import c_struct

KERNEL_DIR = Path(__file__).resolve().parent
# no -I: source_text inlines the headers, so that CuPy's cache key (source and options) covers them
COMPILE_OPTIONS = ("-std=c++17",)

# Registers per thread that every kernel must fit without spilling (checked by the tests
# through compile_report). 64 lets an SM hold 1024 resident threads (32 warps, half of
# sm_80/sm_90's 2048): enough warps to hide the dependent-load latency of the bit readers,
# and the kernels' __launch_bounds__ (128 threads x 8 blocks) ask ptxas for it.
REGISTER_BUDGET = 64


# The kernels' own shared-memory layouts and launch sizes (l3_common.cuh, fast.cu and lz.cu describe them and
# static_assert their structs against them); the host sizes launches by them.
COMPACT_BAND_ROWS = fmt.COMPACT_BAND_ROWS
COMPACT_HEADER_SHARED_BYTES = 64  # the TileWriter's slot
# per channel: the sums and counts of the contexts x 32 rows (int), and the 32 row ends (int64)
COMPACT_STATE_BYTES = 2 * compact.CONTEXTS * COMPACT_BAND_ROWS * 4 + COMPACT_BAND_ROWS * 8
COMPACT_RING_MIN = fmt.MIN_TILE_WIDTH  # the narrowest tile's columns
COMPACT_RING_MAX = 128  # columns staged at once; a wider tile is written in strips
FAST_THREADS = 128  # a thread per group of the widest tile's row head (fast.cu asserts it)
FAST_FIXED_BYTES = 1008  # sizeof(FastShared) rounded up to 16 (fast.cu asserts both)
FAST_STAGE_BUDGET = 32768  # bytes of staged rows aimed at; at least 2 rows are staged
LZ_WARPS_PER_BLOCK = 4  # l3_expand_lz: a warp per expansion
LZ_SHARED_BYTES_PER_WARP = 9384  # sizeof(LzCodes): a warp's Huffman code tables (lz.cu asserts it)
PALETTE_MAX_COLOURS = fmt.PALETTE_MAX_COLOURS  # a palette tile's colour table, in shared memory
ANS_WARPS_PER_BLOCK = 4  # l3_build_ans_tables: a warp per kind-10 stream
_LAUNCH_CONSTANTS = ("COMPACT_HEADER_SHARED_BYTES", "COMPACT_STATE_BYTES", "COMPACT_RING_MIN",
                     "COMPACT_RING_MAX", "FAST_THREADS", "FAST_FIXED_BYTES", "FAST_STAGE_BUDGET",
                     "LZ_WARPS_PER_BLOCK", "LZ_SHARED_BYTES_PER_WARP", "ANS_WARPS_PER_BLOCK")

CONSTANTS_HEADER = "l3_constants.cuh"  # generated: no such file in kernels/


def kernel_constants() -> dict:
    """{C name: (value, where it comes from)} of every constant the kernels take from Python, read
    from the modules when called (so the compiled source follows an edited constant)."""
    def from_module(module, names, prefix=""):  # C name: the prefix and the Python name
        label = module.__name__.rpartition(".")[2]
        return {prefix + name: (getattr(module, name), f"{label}.{name}") for name in names}

    format_kinds = [name for name, value in vars(fmt).items() if type(value) is int
                    and name.startswith(("KIND_", "STATUS_", "TRANSFORM_", "PALETTE_"))]
    groups = [
        from_module(fmt, (*format_kinds, "COMPACT_BAND_ROWS", "MIN_TILE_WIDTH", "MAX_TILE_WIDTH")),
        from_module(batch, ("STATUS_CODE_BITS", "STATUS_BAND_BITS", "STATUS_RANK_LIMIT")),
        from_module(streams, ("PLANE_OWN", "PLANE_MEMBER")),
        from_module(compact, ("CONTEXTS", "INTERRUPT_CONTEXT", "UNARY_LIMIT", "RESET_COUNT",
                              "INITIAL_COUNT", "ADAPT_CAP_SHIFT", "RUN_INDEX_MAX", "K_NIBBLE_BYTES")),
        from_module(compact, ("HEADER_BYTES",), "COMPACT_"),
        from_module(fast, ("GROUP_SIZE", "QSUM_BITS", "SPARSE_CODE", "POSITION_BITS", "PHASES",
                           "FORM_SPARSE", "FORM_PACKED", "FORM_BITMAP", "FORM_RICE"), "FAST_"),
        from_module(lz4block, ("MIN_MATCH",), "LZ_"),
        from_module(huffman, ("TABLES", "LITERAL_TABLE", "TOKEN_TABLE", "OFFSET_LOW_TABLE",
                              "OFFSET_HIGH_TABLE", "MAX_CODE_BITS", "BITMAP_BYTES", "SYMBOLS",
                              "EXTENSION_BITS"), "LZ_"),
        {name: (globals()[name], f"cuda_c.{name}") for name in _LAUNCH_CONSTANTS},
        from_module(ans, ("NO_TOKEN", "SPLIT_EXPONENT", "MANTISSA_BITS"), "ANS_"),
        from_module(ans, ("ANS_LOW", "ANS_CONTEXTS", "GRADIENT_CONTEXTS", "ANS_MIN_PRECISION",
                          "ANS_MAX_PRECISION")),
        {f"ANS_ACTIVITY_EDGE_{i}": (edge, f"ans.ACTIVITY_EDGES[{i}]")
         for i, edge in enumerate(ans.ACTIVITY_EDGES)},
        {"ANS_ACTIVITY_LIMIT": (len(ans.ANS_CONTEXT_OF_ACTIVITY), "len(ans.ANS_CONTEXT_OF_ACTIVITY)")},
        {f"ANS_GRADIENT_EDGE_{i}": (edge, f"ans.GRADIENT_EDGES[{i}]")
         for i, edge in enumerate(ans.GRADIENT_EDGES)},
        from_module(ans_stage, [name for name in vars(ans_stage) if name.startswith("BLOCK_")], "ANS_"),
        from_module(ans_stage, ("ANS_HEADER_BYTES", "ANS_TOKEN_COLUMNS", "ANS_SHORT_STATUS",
                                "ANS_TABLE_STATUS", "ANS_ROW_SIZE_STATUS", "ANS_ROW_STATUS")),
    ]
    constants = {}
    for group in groups:  # one C name, one source: a second would silently win in a dict merge
        for name, entry in group.items():
            if name in constants:
                raise fmt.L3Error(f"kernel constant {name} comes from both {constants[name][1]} and {entry[1]}")
            constants[name] = entry
    for name, (value, _) in constants.items():
        if not -(1 << 31) <= value < 1 << 31:
            raise ValueError(f"{name} = {value} does not fit the kernels' int enumerators")
    return constants


def constants_header() -> str:
    """The text of CONSTANTS_HEADER: kernel_constants() as enumerators of namespace l3 (enumerators,
    not constexpr variables: NVRTC would emit those as device globals)."""
    lines = ["// Generated by kernels/cuda_c.py (constants_header) from l3codec's Python modules.",
             "#pragma once", "namespace l3 {", "enum : int {"]
    lines += [f"    {name} = {value},  // {source}" for name, (value, source) in kernel_constants().items()]
    lines += ["};", "}  // namespace l3", ""]
    return "\n".join(lines)


RECORDS_HEADER = "l3_records.cuh"  # generated: no such file in kernels/
# The launch tables' records the kernels index, as C struct name: (module, dtype name). The dtype is
# the one definition; the struct is generated from it.
_KERNEL_RECORDS = {"L3Item": (batch, "ITEM_DTYPE"), "L3Task": (batch, "TASK_DTYPE"),
                   "L3Expansion": (lz_stage, "EXPANSION_DTYPE"),
                   "L3AnsTable": (ans_stage, "TABLE_STAGE_DTYPE")}


def kernel_records() -> dict:
    """{C struct name: (numpy record dtype, where it comes from)} of the tables the kernels read, read
    from the modules when called (so the compiled source follows an edited dtype)."""
    return {name: (getattr(module, dtype_name), f"{module.__name__.rpartition('.')[2]}.{dtype_name}")
            for name, (module, dtype_name) in _KERNEL_RECORDS.items()}


def records_header() -> str:
    """The text of RECORDS_HEADER: kernel_records() as C structs at global scope, each with the
    static_asserts of its size and field offsets (c_records.c_struct)."""
    lines = ["// Generated by kernels/cuda_c.py (records_header) from l3codec's numpy record dtypes: the",
             "// launch tables as the kernels index them; what each field means is said beside its dtype.",
             "#pragma once", ""]
    for name, (dtype, origin) in kernel_records().items():
        lines += [c_struct(name, dtype, origin), ""]
    return "\n".join(lines)


# The headers written at compile time, by name: what an #include of one of them gets.
GENERATED_HEADERS = {CONSTANTS_HEADER: constants_header, RECORDS_HEADER: records_header}


# above this a kernel must opt in (cudaFuncAttributeMaxDynamicSharedMemorySize)
DEFAULT_SHARED_LIMIT = 48 * 1024


def compact_ring_columns(tile_width):
    """Columns of the compact staging ring: the tile width rounded up to a power of two, at most 128."""
    tile_width = np.asarray(tile_width, np.int64)
    ring = np.full(tile_width.shape, COMPACT_RING_MIN, np.int64)
    while np.any((ring < tile_width) & (ring < COMPACT_RING_MAX)):
        ring = np.where((ring < tile_width) & (ring < COMPACT_RING_MAX), ring * 2, ring)
    return ring


def fast_ring_rows(channels, tile_width, tile_height, sample_bytes):
    """Rows of the fast staging ring: FAST_STAGE_BUDGET worth, at least 2, at most tile_height + 1."""
    rows = FAST_STAGE_BUDGET // (np.asarray(channels, np.int64) * tile_width * sample_bytes)
    return np.maximum(np.minimum(rows, np.asarray(tile_height, np.int64) + 1), 2)


def _compact_block(launch) -> tuple:
    return (32, int(launch.max_channels), 1)  # a warp per channel


def _fast_block(launch) -> tuple:
    return (FAST_THREADS, 1, 1)


def _compact_shared_bytes(channels, tile_width, tile_height, sample_bytes):
    return COMPACT_HEADER_SHARED_BYTES + channels * (
        COMPACT_STATE_BYTES + COMPACT_BAND_ROWS * compact_ring_columns(tile_width) * sample_bytes
        + PALETTE_MAX_COLOURS * sample_bytes
    )


def _fast_shared_bytes(channels, tile_width, tile_height, sample_bytes):
    rows = fast_ring_rows(channels, tile_width, tile_height, sample_bytes)
    return FAST_FIXED_BYTES + (rows * tile_width + PALETTE_MAX_COLOURS) * channels * sample_bytes


@dataclass(frozen=True)
class KernelMode:
    """One mode's kernel: its source, its name, its block shape for a launch, and the dynamic
    shared memory an item needs (from arrays of channels, tile width, tile height, sample bytes)."""

    source: str
    kernel: str
    block_shape: Callable
    shared_bytes: Callable


KERNELS = {
    MODE_COMPACT: KernelMode("compact.cu", "l3_decode_compact", _compact_block, _compact_shared_bytes),
    MODE_FAST: KernelMode("fast.cu", "l3_decode_fast", _fast_block, _fast_shared_bytes),
}


# The LZ streams' expansion into raw streams, launched before the decode kernels (l3codec/lz_stage.py):
#     l3_expand_lz(uint8* data, const L3Expansion* expansions, int64 count, int32* status)
# a warp per expansion, LZ_WARPS_PER_BLOCK warps per block.
EXPAND_SOURCE, EXPAND_KERNEL = "lz.cu", "l3_expand_lz"
# The kind-10 streams' table blocks (l3codec/ans_stage.py), built after the LZ expansion, before the
# decode kernels:
#     l3_build_ans_tables(uint8* data, int64 data_size, const L3AnsTable* tables, int64 count)
# a warp per table, ANS_WARPS_PER_BLOCK warps per block, no shared memory.
ANS_SOURCE, ANS_KERNEL = "ans.cu", "l3_build_ans_tables"
SOURCES = (*(kernel.source for kernel in KERNELS.values()), EXPAND_SOURCE, ANS_SOURCE)


def block_shape(launch) -> tuple:
    """blockDim for a launch: (32, max_channels, 1) for compact (a warp per channel), (128, 1, 1) for fast."""
    return KERNELS[launch.mode].block_shape(launch)


def shared_memory_bytes(launch) -> int:
    """Dynamic shared memory bytes for a launch: the largest need of its items (8- and 16-bit alike).

    compact: COMPACT_HEADER_SHARED_BYTES + channels * (COMPACT_STATE_BYTES + (32 * ring + 256) * sample_bytes),
    ring = compact_ring_columns(tile_width) (at most 43 KiB: 4 channels, 16-bit).
    fast: FAST_FIXED_BYTES + (ring * tile_width + 256) * channels * sample_bytes, ring =
    fast_ring_rows(...) (about 35 KiB, more only when two rows of the tile exceed the budget:
    up to 67 KiB for 4096-wide 4-channel 16-bit tiles). 256 samples per channel: a palette tile's
    colour table.
    """
    items = launch.items
    need = KERNELS[launch.mode].shared_bytes(
        items["channels"].astype(np.int64), items["tile_width"].astype(np.int64),
        items["tile_height"].astype(np.int64), items["bits"].astype(np.int64) // 8)
    return int(need.max())


def kernel_name(launch) -> str:
    return KERNELS[launch.mode].kernel


_LOCAL_INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"\s*(//.*)?$')  # a trailing // comment allowed


def source_text(filename: str) -> str:
    """kernels/<filename> with its #include "..." headers inlined, each once (they are #pragma once).

    CuPy keys its on-disk kernel cache on the source string and the options, not on the
    headers a -I would pull in: with every header inlined, editing one changes the key.
    #line directives keep compiler messages pointing at the real files and lines.
    """
    return _inline_includes(KERNEL_DIR / filename, set())


def _inline_includes(path: Path, included: set) -> str:
    included.add(path.name)
    lines = [f'#line 1 "{path}"']
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = _LOCAL_INCLUDE.match(line)
        if match:
            header = match.group(1)
            if header in GENERATED_HEADERS and header not in included:
                included.add(header)
                lines.append(f'#line 1 "{header}"')
                lines.append(GENERATED_HEADERS[header]().replace("#pragma once", ""))
                lines.append(f'#line {number + 1} "{path}"')
            elif header not in included:
                lines.append(_inline_includes(KERNEL_DIR / header, included))
                lines.append(f'#line {number + 1} "{path}"')
            else:
                lines.append("")
        else:
            lines.append("" if line.strip() == "#pragma once" else line)
    return "\n".join(lines)


# ---------------------------------------------------------------- CuPy: build and launch

_modules: dict = {}
_modules_lock = threading.Lock()


def load_module(filename: str, device=None):
    """The cupy.RawModule of kernels/<filename>, built once per (device id, compute capability).

    CuPy compiles with NVRTC straight to a cubin for the device's architecture when this
    NVRTC knows it, and to PTX for the driver to finish otherwise (or when
    CUPY_COMPILE_WITH_PTX is set). PTX newer than the driver cannot load: that case
    raises a RuntimeError that says so.
    """
    import cupy

    device = cupy.cuda.Device() if device is None else cupy.cuda.Device(device)
    key = (filename, int(device.id), str(device.compute_capability))
    with _modules_lock:
        module = _modules.get(key)
        if module is not None:
            return module
        with device:
            module = cupy.RawModule(code=source_text(filename), options=COMPILE_OPTIONS)
            try:
                stage = ANS_KERNEL if filename == ANS_SOURCE else EXPAND_KERNEL
                module.get_function(next((k.kernel for k in KERNELS.values() if k.source == filename), stage))
            except Exception as error:  # CuPy raises its driver error types; their text names the cause
                text = str(error)
                if "UNSUPPORTED_PTX_VERSION" in text or "NO_BINARY_FOR_GPU" in text or "INVALID_PTX" in text:
                    raise RuntimeError(
                        f"cannot load the l3codec CUDA kernels on device {device.id} (sm_{device.compute_capability}):"
                        f" NVRTC {_nvrtc_version(cupy)} produced PTX that this driver"
                        f" (CUDA {_driver_version(cupy)}) cannot compile ({text}). Update the NVIDIA driver,"
                        " or install a CUDA runtime/NVRTC that knows this GPU's architecture so CuPy"
                        " compiles a cubin (and unset CUPY_COMPILE_WITH_PTX)."
                    ) from error
                raise
        _modules[key] = module
        return module


def _nvrtc_version(cupy) -> str:
    try:
        major, minor = cupy.cuda.nvrtc.getVersion()
        return f"{major}.{minor}"
    except Exception:  # noqa: BLE001 - informational only
        return "?"


def _driver_version(cupy) -> str:
    try:
        version = cupy.cuda.runtime.driverGetVersion()
        return f"{version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001 - informational only
        return "?"


def device_tables(launch):
    """The launch's item and task tables as cupy int64 arrays (CuPy has no record dtypes)."""
    import cupy

    items = cupy.asarray(np.ascontiguousarray(launch.items).view(np.int64))
    tasks = cupy.asarray(np.ascontiguousarray(launch.tasks).view(np.int64))
    return items, tasks


def launch(launch, data, stream_starts, stream_ends, out, status, *, stream=None, items=None, tasks=None):
    """Launch the kernel for one Launch of a prepared batch, on `stream` (default: the current one).

    Cupy arrays on the current device: data uint8 (batch.data), stream_starts/stream_ends int64,
    out uint8 (the batch's output buffer), status int32 zeros, one per item of the launch.
    items/tasks are the launch's tables from device_tables(launch), uploaded here if not given.
    """
    import cupy

    filename, name = KERNELS[launch.mode].source, KERNELS[launch.mode].kernel
    task_count = len(launch.tasks)
    if task_count == 0:
        return
    if status.size != len(launch.items) or status.dtype != np.int32:
        raise ValueError("status must be int32 with one entry per item of the launch")
    table = launch.items
    needed = int(
        (
            table["out_offset"]
            + (table["region_h"] - 1) * table["out_row_pitch"]
            + table["region_w"] * table["channels"] * (table["bits"] // 8)
        ).max()
    )
    if out.size < needed:
        raise ValueError(f"out has {out.size} bytes, the launch writes up to byte {needed}")
    if out.data.ptr % int(table["bits"].max() // 8):
        raise ValueError("out must be aligned to the sample size")
    context = stream if stream is not None else _NoStream()
    with context:
        if items is None or tasks is None:
            items, tasks = device_tables(launch)
        kernel = load_module(filename).get_function(name)
        shared = shared_memory_bytes(launch)
        if shared > DEFAULT_SHARED_LIMIT:
            device = cupy.cuda.Device()
            limit = device.attributes["MaxSharedMemoryPerBlockOptin"]
            if shared > limit:
                raise RuntimeError(
                    f"{name} needs {shared} bytes of shared memory for these tiles; device {device.id} allows"
                    f" {limit} per block (use a smaller tile width)"
                )
            kernel.max_dynamic_shared_size_bytes = max(kernel.max_dynamic_shared_size_bytes, shared)
        args = (
            data,
            np.int64(data.size),
            stream_starts,
            stream_ends,
            items,
            tasks,
            np.int64(task_count),
            out,
            status,
        )
        kernel((task_count,), block_shape(launch), args, shared_mem=shared)


def expand_grid(count: int) -> tuple:
    """(grid, block, dynamic shared bytes) of l3_expand_lz for `count` expansions: a warp each, and
    each warp's codes for a Huffman-coded stream."""
    warps = LZ_WARPS_PER_BLOCK
    return (-(-count // warps),), (32 * warps,), warps * LZ_SHARED_BYTES_PER_WARP


def launch_expand(data, expansions, status, *, stream=None):
    """Expand a packed batch's LZ streams into its scratch area (batch.packed_views: data is the whole
    device buffer, expansions its (n, 11) int64 table, status the batch's int32 status array)."""
    count = int(expansions.shape[0])
    if count == 0:
        return
    context = stream if stream is not None else _NoStream()
    with context:
        kernel = load_module(EXPAND_SOURCE).get_function(EXPAND_KERNEL)
        grid, block, shared = expand_grid(count)
        kernel(grid, block, (data, expansions, np.int64(count), status), shared_mem=shared)


def ans_tables_grid(count: int) -> tuple:
    """(grid, block) of l3_build_ans_tables for `count` kind-10 streams: a warp each."""
    return (-(-count // ANS_WARPS_PER_BLOCK),), (32 * ANS_WARPS_PER_BLOCK,)


def launch_ans_tables(data, tables, *, stream=None):
    """Build a packed batch's kind-10 table blocks in its scratch area (batch.packed_views: data is the whole
    device buffer; tables batch.packed_ans_records' (n, 8) int64 view), after launch_expand."""
    count = int(tables.shape[0])
    if count == 0:
        return
    context = stream if stream is not None else _NoStream()
    with context:
        kernel = load_module(ANS_SOURCE).get_function(ANS_KERNEL)
        grid, block = ans_tables_grid(count)
        kernel(grid, block, (data, np.int64(data.size), tables, np.int64(count)))


class _NoStream:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------- NVRTC resource report

_PTXAS_FUNCTION = re.compile(r"Function properties for (\w+)")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def nvrtc_compile(filename: str, arch: str, extra_options=()) -> tuple:
    """Compile kernels/<filename> with NVRTC for arch ("sm_80"); returns (cubin bytes, log text)."""
    from cuda.bindings import nvrtc

    def check(result, what, prog=None):
        error = result[0] if isinstance(result, tuple) else result
        if error != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = _program_log(nvrtc, prog) if prog is not None else ""
            raise RuntimeError(f"NVRTC {what} failed for {filename} ({arch}): {error}\n{log}")
        return result

    err, prog = nvrtc.nvrtcCreateProgram(source_text(filename).encode(), filename.encode(), 0, [], [])
    check(err, "create")
    try:
        options = [*COMPILE_OPTIONS, f"--gpu-architecture={arch}", *extra_options]
        check(nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options]), "compile", prog)
        log = _program_log(nvrtc, prog)
        _, size = check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = bytearray(size)  # NVRTC writes into it: never a bytes object (see _program_log)
        check(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
        return bytes(cubin), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _program_log(nvrtc, prog) -> str:
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    # a bytearray: NVRTC writes through the pointer it is given, and an empty log is 1 byte, where
    # b" " * 1 is CPython's shared b" ": written over, bytes([32]) read b"\0" for the rest of the process
    log = bytearray(size)
    nvrtc.nvrtcGetProgramLog(prog, log)
    return log.decode(errors="replace").rstrip("\0 ")


def compile_report(arch: str) -> dict:
    """Compile every kernels/*.cu with NVRTC for arch ("sm_80", "sm_90") and ptxas -v.

    Returns {kernel name: {"file", "registers", "stack_frame", "spill_stores", "spill_loads",
    "shared", "log"}} from ptxas's report (shared = static shared memory bytes; the kernels use
    only dynamic shared memory, see shared_memory_bytes).
    """
    report = {}
    for filename in SOURCES:
        _, log = nvrtc_compile(filename, arch, ("--ptxas-options=-v",))
        report.update(parse_ptxas_log(log, filename))
    return report


def parse_ptxas_log(log: str, filename: str) -> dict:
    """{kernel name: {"file", "registers", "stack_frame", "spill_stores", "spill_loads", "shared",
    "log"}} from ptxas -v output."""
    report = {}
    name = None
    for line in log.splitlines():
        match = _PTXAS_FUNCTION.search(line)
        if match:
            name = match.group(1)
            report[name] = {"file": filename, "log": log, "shared": 0}
            continue
        if name is None:
            continue
        match = _PTXAS_STACK.search(line)
        if match:
            stack, stores, loads = (int(v) for v in match.groups())
            report[name].update(stack_frame=stack, spill_stores=stores, spill_loads=loads)
        match = _PTXAS_USED.search(line)
        if match:
            report[name]["registers"] = int(match.group(1))
        match = _PTXAS_SMEM.search(line)  # on the "Used" line (NVRTC) or a summary line (nvJitLink)
        if match:
            report[name]["shared"] = int(match.group(1))
    return report
