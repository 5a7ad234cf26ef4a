"""Run the CUDA C kernels on the CPU: the unchanged .cu files built with g++ under cuda_emulation.h.

decode_batch_emulated() prepares a batch with l3codec.batch.prepare (so the kernels get
exactly the tables a GPU gets), runs every launch through the emulator and returns the
per-item images and statuses; given a Traffic, it also counts the kernels' global memory
accesses per warp instruction (a build with g++'s -fsanitize=thread hooks, see
cuda_emulation.h beside this file). Used by the tests and by bench/gpu.py. Libraries are cached in a directory keyed by the hash of
every source, header and flag ($L3_EMULATION_CACHE, default <tmp>/l3codec-emulation).
Needs g++ (or $CXX) and Linux (ucontext, mmap guard pages).
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from l3codec import batch as l3batch
from l3codec.kernels import cuda_c

KERNEL_DIR = Path(__file__).resolve().parent
EMULATION_HEADER = Path(__file__).resolve().parent / "cuda_emulation.h"
CXX = os.environ.get("CXX", "g++")
CXXFLAGS = (
    "-std=c++17",
    "-O1",
    "-fPIC",
    "-fno-strict-aliasing",
    "-Wall",
    "-Wno-unused-function",
    "-Wno-unknown-pragmas",
)
# the kernel units of a traffic build: every load and store calls the header's counters
TRAFFIC_FLAGS = ("-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0")
# the kernel units of a coverage build: every basic block calls the header's counter; -g maps them to lines
COVERAGE_FLAGS = ("-g", "-fsanitize-coverage=trace-pc")
BUILD_FLAGS = {"plain": (), "traffic": TRAFFIC_FLAGS, "coverage": COVERAGE_FLAGS}
ORDERS = {"forward": 0, "reversed": 1, "shuffled": 2}
KERNEL_INDEX = {key: i for i, key in enumerate(sorted(cuda_c.KERNELS))}
CANARY = 0xCD
CANARY_BYTES = 64


class EmulationError(RuntimeError):
    """The emulator stopped a launch (divergent barrier or shuffle, bad launch shape...)."""


def cache_dir() -> Path:
    return Path(os.environ.get("L3_EMULATION_CACHE", Path(tempfile.gettempdir()) / "l3codec-emulation"))


def build_library(name: str, sources, generated=None, *, kernel_flags=(), appendices=None) -> ctypes.CDLL:
    """Compile C++/CUDA sources (paths) plus generated sources ({filename: text}) into a shared
    library with the emulation header forced in, and load it; cached by content hash. The kernels'
    generated headers (cuda_c.GENERATED_HEADERS, the texts NVRTC gets) are written beside the build
    and found through -I. kernel_flags are added for the .cu units only (TRAFFIC_FLAGS: not for the
    shim, whose emulator code must not count itself). appendices: {source file name: text} compiled at
    the end of that source's unit, where the source's own internals are in scope (the unit includes the
    unchanged file, then the text)."""
    sources = [Path(p) for p in sources]
    generated = dict(generated or {})
    appendices = dict(appendices or {})
    headers = {filename: text() for filename, text in cuda_c.GENERATED_HEADERS.items()}
    digest = hashlib.sha256()
    for filename, text in headers.items():
        digest.update(filename.encode() + text.encode())
    for part in (CXX, *CXXFLAGS, *kernel_flags, EMULATION_HEADER.read_text(), name):
        digest.update(part.encode())
    for path in sources:
        digest.update(path.name.encode() + path.read_bytes() + appendices.get(path.name, "").encode())
    for header in sorted(KERNEL_DIR.glob("*.cuh")):
        digest.update(header.read_bytes())
    for filename, text in sorted(generated.items()):
        digest.update(filename.encode() + text.encode())
    directory = cache_dir() / f"{name}-{digest.hexdigest()[:20]}"
    library = directory / f"lib{name}.so"
    if not library.exists():
        directory.mkdir(parents=True, exist_ok=True)
        for filename, text in headers.items():  # each whole, for a concurrent build of the same digest
            temporary_header = directory / f"{filename}.{os.getpid()}"
            temporary_header.write_text(text)
            os.replace(temporary_header, directory / filename)
        units = [path for path in sources if path.name not in appendices]
        for path in sources:
            if path.name in appendices:
                generated[path.name] = f'#include "{path.resolve()}"\n{appendices[path.name]}\n'
        for filename, text in generated.items():
            path = directory / filename
            path.write_text(text)
            units.append(path)
        objects, jobs = [], []
        for unit in units:
            obj = directory / f"{unit.name}.{os.getpid()}.o"
            command = [
                CXX,
                *CXXFLAGS,
                *(kernel_flags if unit.suffix == ".cu" else ()),
                "-include",
                str(EMULATION_HEADER),
                f"-I{directory}",
                f"-I{KERNEL_DIR}",
                "-x",
                "c++",
                "-c",
                str(unit),
                "-o",
                str(obj),
            ]
            jobs.append(
                subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            )
            objects.append(obj)
        errors = [job.communicate()[0] for job in jobs]
        if any(job.returncode for job in jobs):
            raise EmulationError("emulation build failed:\n" + "\n".join(errors))
        temporary = directory / f"lib{name}.{os.getpid()}.so"
        subprocess.run([CXX, "-shared", "-o", str(temporary), *map(str, objects)], check=True)
        os.replace(temporary, library)
        for obj in objects:
            obj.unlink(missing_ok=True)
    return ctypes.CDLL(str(library))


_SHIM = r"""
// Launchers for the emulated kernels, and the C layouts the tests compare with numpy.
#include <cstddef>
#include "l3_common.cuh"

CUDA_EMU_DYNAMIC_SHARED(l3_shared_memory);
CUDA_EMU_TRAFFIC_CALLBACKS();
CUDA_EMU_COVERAGE_CALLBACK();

#define L3_KERNEL_PARAMETERS const unsigned char*, long long, const long long*, const long long*, \
    const L3Item*, const L3Task*, long long, unsigned char*, int*
%(declarations)s
typedef void (*Kernel)(L3_KERNEL_PARAMETERS);
static const Kernel kernels[] = {%(kernels)s};
static const int kernel_count = sizeof(kernels) / sizeof(kernels[0]);

extern "C" int l3emu_launch(int kernel, long long grid, int bx, int by, int bz, long long shared_bytes, int order,
                            unsigned seed, const unsigned char* data, long long data_size, const long long* starts,
                            const long long* ends, const L3Item* items, const L3Task* tasks, long long task_count,
                            unsigned char* out, int* status) {
    if (kernel < 0 || kernel >= kernel_count) return -2;
    const Kernel run = kernels[kernel];
    return cuda_emu::launch(dim3((unsigned)grid), dim3(bx, by, bz), (size_t)shared_bytes, order, seed, [=] {
        run(data, data_size, starts, ends, items, tasks, task_count, out, status);
    });
}

extern "C" void l3_expand_lz(unsigned char*, const L3Expansion*, long long, int*);

extern "C" int l3emu_expand(long long grid, int threads, long long shared_bytes, int order, unsigned seed,
                            unsigned char* data, const L3Expansion* expansions, long long count, int* status) {
    return cuda_emu::launch(dim3((unsigned)grid), dim3(threads, 1, 1), (size_t)shared_bytes, order, seed, [=] {
        l3_expand_lz(data, expansions, count, status);
    });
}

extern "C" void l3_build_ans_tables(unsigned char*, long long, const L3AnsTable*, long long);

extern "C" int l3emu_ans_tables(long long grid, int threads, int order, unsigned seed, unsigned char* data,
                                long long data_size, const L3AnsTable* tables, long long count) {
    return cuda_emu::launch(dim3((unsigned)grid), dim3(threads, 1, 1), 0, order, seed, [=] {
        l3_build_ans_tables(data, data_size, tables, count);
    });
}

extern "C" const char* l3emu_last_error() { return cuda_emu::last_error(); }
%(traffic_exports)s
// the generated structs as compiled: field < 0 gives the size of record number `record` (in
// cuda_c.kernel_records() order), else the offset of its field number `field` (in its dtype's order)
extern "C" long long l3emu_record_layout(int record, int field) {
%(record_layouts)s
    return -1;
}

extern "C" long long l3emu_compact_shared_bytes(long long channels, long long tile_width, long long sample_bytes) {
    return l3::compact_shared_bytes(channels, tile_width, sample_bytes);
}

extern "C" long long l3emu_fast_shared_bytes(long long channels, long long tile_width, long long tile_height,
                                             long long sample_bytes) {
    return l3::fast_shared_bytes(channels, tile_width, tile_height, sample_bytes);
}

// the generated constants as the kernels were compiled with them, in cuda_c.kernel_constants() order
extern "C" long long l3emu_constant(int index) {
    static const long long values[] = {%(constants)s};
    return values[index];
}
"""

# Constants a kernel source keeps to itself (the kernel's choice, not Python's, so not in the generated
# headers): the emulation build exports the values its source compiled with, for the tests that need them.
PRIVATE_CONSTANTS = {"lz.cu": ("LZ_LOOKUP_BITS",)}


def _record_layouts() -> str:
    """The body of the shim's l3emu_record_layout: sizeof and offsetof of each generated struct."""
    cases = []
    for index, (name, (dtype, _)) in enumerate(cuda_c.kernel_records().items()):
        offsets = ", ".join(f"offsetof({name}, {field})" for field in dtype.names)
        cases.append(f"    if (record == {index}) {{\n"
                     f"        static const long long offsets[] = {{{offsets}}};\n"
                     f"        return field < 0 ? (long long)sizeof({name}) : offsets[field];\n    }}")
    return "\n".join(cases)


def _private_constants_appendix(source: str) -> str:
    """What kernel_library compiles at the end of `source`'s unit: l3emu_private_<stem>(index), the
    values of its PRIVATE_CONSTANTS."""
    values = ", ".join(f"l3::{name}" for name in PRIVATE_CONSTANTS[source])
    return (f"// {source}'s own constants as compiled, in emulation.PRIVATE_CONSTANTS order\n"
            f'extern "C" long long l3emu_private_{Path(source).stem}(int index) {{\n'
            f"    static const long long values[] = {{{values}}};\n    return values[index];\n}}")


TRAFFIC_EXPORTS = r"""
#include <dlfcn.h>
// global memory traffic (counted in a build whose kernel units have TRAFFIC_FLAGS)
extern "C" void l3emu_traffic_region(int region, const void* base, long long size) {
    cuda_emu::traffic_region(region, base, (size_t)size);
}
extern "C" void l3emu_traffic_start() { cuda_emu::traffic_start(); }
extern "C" void l3emu_traffic_stop() { cuda_emu::traffic_stop(); }
// lane accesses, bytes, warp instructions, sectors, full sectors of one region and direction
extern "C" void l3emu_traffic_count(int region, int write, unsigned long long* count) {
    const cuda_emu::TrafficCount& c = cuda_emu::g_traffic.count[region][write != 0];
    const unsigned long long values[] = {c.lane_accesses, c.bytes, c.instructions, c.sectors, c.full_sectors};
    for (int i = 0; i < 5; ++i) count[i] = values[i];
}

// warp executions of the kernels' basic blocks (counted in a build whose kernel units have COVERAGE_FLAGS)
extern "C" void l3emu_coverage_start() { cuda_emu::coverage_start(); }
extern "C" void l3emu_coverage_stop() { cuda_emu::coverage_stop(); }
extern "C" long long l3emu_coverage_size() { return (long long)cuda_emu::g_coverage.warp_runs.size(); }
// the blocks' callback return addresses as offsets into the library file's mapping, and their counts
extern "C" void l3emu_coverage_read(unsigned long long* offsets, unsigned long long* counts) {
    Dl_info info;
    dladdr(reinterpret_cast<void*>(&l3emu_coverage_read), &info);
    long long i = 0;
    for (const auto& [pc, runs] : cuda_emu::g_coverage.warp_runs) {
        offsets[i] = pc - reinterpret_cast<uintptr_t>(info.dli_fbase);
        counts[i++] = runs;
    }
}
"""

# the arrays handed to the kernels, in the order of their traffic region numbers
TRAFFIC_REGIONS = ("data", "stream_starts", "stream_ends", "items", "tasks", "out", "status")


def bind_traffic(lib: ctypes.CDLL) -> None:
    """Declare the TRAFFIC_EXPORTS functions of a library built with them."""
    ptr = ctypes.c_void_p
    lib.l3emu_traffic_region.argtypes = [ctypes.c_int, ptr, ctypes.c_longlong]
    lib.l3emu_traffic_count.argtypes = [ctypes.c_int, ctypes.c_int, ptr]
    lib.l3emu_coverage_size.restype = ctypes.c_longlong
    lib.l3emu_coverage_read.argtypes = [ptr, ptr]
    for function in (
        lib.l3emu_traffic_region,
        lib.l3emu_traffic_start,
        lib.l3emu_traffic_stop,
        lib.l3emu_coverage_start,
        lib.l3emu_coverage_stop,
        lib.l3emu_coverage_read,
    ):
        function.restype = None


class Traffic:
    """Global memory traffic of emulated launches, added up over the launches it is given to.

    counts[(region, write)] is a numpy array of COUNT_FIELDS for the regions of
    TRAFFIC_REGIONS: what the lanes asked for (accesses, bytes), the warp instructions they
    issued, the distinct 32-byte sectors those touched, and the sectors an instruction wrote
    whole (stores only).
    """

    COUNT_FIELDS = ("lane_accesses", "bytes", "instructions", "sectors", "full_sectors")

    def __init__(self):
        self.counts = {
            (region, write): np.zeros(len(self.COUNT_FIELDS), np.uint64)
            for region in TRAFFIC_REGIONS
            for write in (False, True)
        }

    def get(self, region: str, write: bool, field: str) -> int:
        return int(self.counts[(region, write)][self.COUNT_FIELDS.index(field)])

    def add_from(self, lib: ctypes.CDLL) -> None:
        """Add the counts of the library's last traffic_start .. traffic_stop."""
        buffer = np.zeros(len(self.COUNT_FIELDS), np.uint64)
        for index, region in enumerate(TRAFFIC_REGIONS):
            for write in (False, True):
                lib.l3emu_traffic_count(index, int(write), _pointer(buffer))
                self.counts[(region, write)] += buffer


class WarpCoverage:
    """Warp executions of the emulated kernels' basic blocks, added up over launches.

    runs[offset]: how often warps ran the block whose coverage callback returns to `offset`
    in library_path (the coverage build's shared library, to map offsets to source lines).
    """

    def __init__(self):
        self.runs = {}
        self.library_path = None

    def add_from(self, lib: ctypes.CDLL) -> None:
        size = lib.l3emu_coverage_size()
        offsets, counts = np.zeros(size, np.uint64), np.zeros(size, np.uint64)
        lib.l3emu_coverage_read(_pointer(offsets), _pointer(counts))
        for offset, count in zip(offsets.tolist(), counts.tolist()):
            self.runs[offset] = self.runs.get(offset, 0) + count
        self.library_path = lib._name


_libraries = {}


def kernel_library(build: str = "plain") -> ctypes.CDLL:
    """The emulated l3codec kernels (built on first use). build: "plain", "traffic" (counts
    global memory accesses) or "coverage" (counts basic blocks run per warp); both slower."""
    if build not in _libraries:
        names = [cuda_c.KERNELS[key].kernel for key in sorted(cuda_c.KERNELS)]
        declarations = "\n".join(f'extern "C" void {name}(L3_KERNEL_PARAMETERS);' for name in names)
        shim = _SHIM % {
            "declarations": declarations,
            "kernels": ", ".join(names),
            "traffic_exports": TRAFFIC_EXPORTS,
            "constants": ", ".join(f"l3::{name}" for name in cuda_c.kernel_constants()),
            "record_layouts": _record_layouts(),
        }
        lib = build_library(
            "l3kernels" if build == "plain" else f"l3kernels-{build}",
            [KERNEL_DIR / name for name in cuda_c.SOURCES],
            {"shim.cpp": shim},
            kernel_flags=BUILD_FLAGS[build],
            appendices={source: _private_constants_appendix(source) for source in PRIVATE_CONSTANTS},
        )
        i64, i32, ptr = ctypes.c_longlong, ctypes.c_int, ctypes.c_void_p
        lib.l3emu_launch.restype = i32
        lib.l3emu_launch.argtypes = [
            i32,
            i64,
            i32,
            i32,
            i32,
            i64,
            i32,
            ctypes.c_uint,
            ptr,
            i64,
            ptr,
            ptr,
            ptr,
            ptr,
            i64,
            ptr,
            ptr,
        ]
        lib.l3emu_expand.restype = i32
        lib.l3emu_expand.argtypes = [i64, i32, i64, i32, ctypes.c_uint, ptr, ptr, i64, ptr]
        lib.l3emu_ans_tables.restype = i32
        lib.l3emu_ans_tables.argtypes = [i64, i32, i32, ctypes.c_uint, ptr, i64, ptr, i64]
        lib.l3emu_last_error.restype = ctypes.c_char_p
        lib.l3emu_record_layout.restype, lib.l3emu_record_layout.argtypes = i64, [i32, i32]
        for source in PRIVATE_CONSTANTS:
            function = getattr(lib, f"l3emu_private_{Path(source).stem}")
            function.restype, function.argtypes = i64, [i32]
        lib.l3emu_compact_shared_bytes.restype = i64
        lib.l3emu_compact_shared_bytes.argtypes = [i64, i64, i64]
        lib.l3emu_fast_shared_bytes.restype = i64
        lib.l3emu_fast_shared_bytes.argtypes = [i64, i64, i64, i64]
        lib.l3emu_constant.restype, lib.l3emu_constant.argtypes = i64, [i32]
        bind_traffic(lib)
        _libraries[build] = lib
    return _libraries[build]


def record_layouts(build: str = "plain") -> dict:
    """{C struct name: (sizeof, {field: offsetof})} of the generated structs as the emulated kernels
    were compiled with them (kernel_library(build)), in cuda_c.kernel_records() order."""
    layout = kernel_library(build).l3emu_record_layout
    return {name: (layout(index, -1), {field: layout(index, number) for number, field in enumerate(dtype.names)})
            for index, (name, (dtype, _)) in enumerate(cuda_c.kernel_records().items())}


def private_constants(build: str = "plain") -> dict:
    """{name: value} of the PRIVATE_CONSTANTS as the emulated kernels were compiled with them."""
    lib = kernel_library(build)
    return {name: getattr(lib, f"l3emu_private_{Path(source).stem}")(index)
            for source, names in PRIVATE_CONSTANTS.items() for index, name in enumerate(names)}


def _pointer(array: np.ndarray) -> int:
    return array.ctypes.data


_libc = ctypes.CDLL(None, use_errno=True)


class GuardedBuffer:
    """A copy of data whose end touches an inaccessible page, so a read past the end faults.

    guard="aligned": the base is 8-byte aligned and at most 7 bytes separate the end from the
    guard page (the kernels' word load path); "tight": the last byte is right before the
    guard (the base is then usually unaligned: the byte load path); "shifted": `shift` zero
    bytes are put before the data so that the base is 8-byte aligned AND the end touches the
    guard (stream offsets must then be moved by `shift`).
    """

    def __init__(self, data: np.ndarray, guard: str = "aligned"):
        if guard not in ("aligned", "tight", "shifted"):
            raise ValueError(f"unknown guard {guard!r}")
        page = mmap.PAGESIZE
        self.shift = -data.size % 8 if guard == "shifted" else 0
        size = data.size + self.shift
        span = -(-size // 8) * 8 if guard == "aligned" else size
        total = -(-span // page) * page + page
        self._map = mmap.mmap(-1, total)
        whole = np.frombuffer(self._map, np.uint8)
        start = total - page - span
        self.array = whole[start : start + size]
        self.array[self.shift :] = data
        address = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        if _libc.mprotect(ctypes.c_void_p(address + total - page), page, 0) != 0:  # PROT_NONE
            raise OSError(ctypes.get_errno(), "mprotect failed")


def aligned_full(size: int, value: int, alignment: int = 256) -> np.ndarray:
    """`size` bytes of `value` at an `alignment`-aligned address, as a GPU allocation is: the traffic
    counters' sectors are offsets from the array's start, and the kernels align stores to addresses."""
    raw = np.full(size + alignment, value, np.uint8)
    skip = -raw.ctypes.data % alignment
    return raw[skip : skip + size]


def with_scratch(batch) -> tuple:
    """(the batch's bytes followed by room for its expanded LZ streams and kind-10 table blocks, the room's
    offset): the scratch area after the data, 8-byte aligned, as on a device (batch.packed_layout puts it
    after the tables); no padding at all when the batch has no stage."""
    scratch_size = sum(l3batch.stage_scratch_sizes(batch))
    scratch = -(-batch.data.size // 8) * 8 if scratch_size else batch.data.size
    padded = np.zeros(scratch + scratch_size, np.uint8)
    padded[:batch.data.size] = batch.data
    return padded, scratch


def expand_emulated(data: np.ndarray, expansions: np.ndarray, status: np.ndarray, order: str = "forward",
                    seed: int = 0, *, lib: ctypes.CDLL | None = None) -> None:
    """Run l3_expand_lz under the emulator, as gpu.launch_packed does before the decode launches:
    data the whole buffer (scratch area included), expansions EXPANSION_DTYPE records or their (n, 11)
    int64 view, status the int32 array their status_index entries name (batch.status_key entries)."""
    expansions = np.ascontiguousarray(expansions)
    count = len(expansions)
    if count == 0:
        return
    lib = kernel_library() if lib is None else lib
    (grid,), (threads,), shared = cuda_c.expand_grid(count)
    if lib.l3emu_expand(grid, threads, shared, ORDERS[order], seed, _pointer(data), _pointer(expansions), count,
                        _pointer(status)) != 0:
        raise EmulationError(f"{cuda_c.EXPAND_KERNEL}: {lib.l3emu_last_error().decode()}")


def build_ans_tables_emulated(data: np.ndarray, tables: np.ndarray, order: str = "forward", seed: int = 0, *,
                              lib: ctypes.CDLL | None = None) -> None:
    """Run l3_build_ans_tables under the emulator, as gpu.launch_packed does after the LZ expansion: data
    the whole buffer (scratch area included), tables ans_stage.TABLE_STAGE_DTYPE records or their (n, 8)
    int64 view (batch.ans_records)."""
    tables = np.ascontiguousarray(tables)
    count = len(tables)
    if count == 0:
        return
    lib = kernel_library() if lib is None else lib
    (grid,), (threads,) = cuda_c.ans_tables_grid(count)
    if lib.l3emu_ans_tables(grid, threads, ORDERS[order], seed, _pointer(data), data.size, _pointer(tables),
                            count) != 0:
        raise EmulationError(f"{cuda_c.ANS_KERNEL}: {lib.l3emu_last_error().decode()}")


def decode_batch_emulated(
    items,
    regions=None,
    order: str = "forward",
    seed: int = 0,
    *,
    guard: str = "aligned",
    block=None,
    traffic: Traffic | None = None,
    coverage: WarpCoverage | None = None,
):
    """Decode L3 files with the emulated CUDA C kernels.

    Returns (images, status): one array per item as l3codec.decode returns it (HW or HWC),
    and an int32 array with each item's status (0, or the STATUS_* of its first failing stream in
    stream order, as the CPU decoder names it: batch.status_codes of the kernels' entries). Raises
    EmulationError when the emulator detects a divergent barrier or shuffle, and AssertionError when a kernel wrote outside the items' output regions. The
    input bytes end at an inaccessible page (see GuardedBuffer for `guard`), so a read past
    data_size faults. block overrides cuda_c.block_shape (to test the kernels' launch checks).
    traffic: add the launches' global memory traffic to it (runs the traffic build);
    coverage: add the warp executions of the kernels' basic blocks (runs the coverage build).
    """
    if traffic is not None and coverage is not None:
        raise ValueError("count traffic or coverage, not both at once")
    batch = l3batch.prepare(items, regions)
    lib = kernel_library("traffic" if traffic is not None else "coverage" if coverage is not None else "plain")
    padded, scratch = with_scratch(batch)  # the guard page follows the scratch area
    data = GuardedBuffer(padded, guard)
    starts, ends, expansions = l3batch.expanded_tables(batch, scratch + data.shift)
    starts, ends = starts + data.shift, ends + data.shift
    expansions["source"] += data.shift
    expansions["source_end"] += data.shift
    expansions["prefix_start"] += data.shift
    out = aligned_full(batch.out_size + CANARY_BYTES, CANARY)
    status = np.zeros(len(batch.infos), np.int32)
    if coverage is not None:  # the LZ expansion's blocks count too (bench/gpu.py prices them apart)
        lib.l3emu_coverage_start()
    expand_emulated(data.array, expansions, status, order, seed, lib=lib)
    tables = l3batch.ans_records(batch, scratch + data.shift)
    for field in ("source", "source_end", "prefix_start"):
        tables[field] += data.shift
    build_ans_tables_emulated(data.array, tables, order, seed, lib=lib)
    if coverage is not None:
        lib.l3emu_coverage_stop()
        coverage.add_from(lib)
    for launch in batch.launches:
        table_items = np.array(launch.items)
        table_items["data_end"] += data.shift
        table_tasks = np.ascontiguousarray(launch.tasks)
        launch_status = np.zeros(len(table_items), np.int32)
        shape = cuda_c.block_shape(launch) if block is None else block
        arrays = (data.array, starts, ends, table_items, table_tasks, out, launch_status)
        for index, array in enumerate(arrays):  # in TRAFFIC_REGIONS order
            lib.l3emu_traffic_region(index, _pointer(array), array.nbytes)
        if traffic is not None:
            lib.l3emu_traffic_start()
        if coverage is not None:
            lib.l3emu_coverage_start()
        result = lib.l3emu_launch(
            KERNEL_INDEX[launch.mode],
            len(table_tasks),
            *shape,
            cuda_c.shared_memory_bytes(launch),
            ORDERS[order],
            seed,
            _pointer(data.array),
            data.array.size,
            _pointer(starts),
            _pointer(ends),
            _pointer(table_items),
            _pointer(table_tasks),
            len(table_tasks),
            _pointer(out),
            _pointer(launch_status),
        )
        if traffic is not None:
            lib.l3emu_traffic_stop()
            traffic.add_from(lib)
        if coverage is not None:
            lib.l3emu_coverage_stop()
            coverage.add_from(lib)
        if result != 0:
            raise EmulationError(f"{cuda_c.kernel_name(launch)}: {lib.l3emu_last_error().decode()}")
        status[launch.item_index] = np.maximum(status[launch.item_index], launch_status)  # as one device array
    written = np.zeros(out.size, bool)
    for offset, shape, dtype in zip(batch.out_offsets, batch.shapes, batch.dtypes):
        written[offset : offset + int(np.prod(shape)) * dtype.itemsize] = True
    outside = np.flatnonzero(~written & (out != CANARY))
    assert outside.size == 0, f"kernels wrote outside the output regions at bytes {outside[:10]}"
    images = [view.copy() for view in l3batch.split_output(batch, out[: batch.out_size])]
    return images, l3batch.status_codes(status)
