"""GPU decode benchmark, and an analytic estimate where no GPU exists.

    python bench/gpu.py [folder] [--batch 64] [--repeat 5] [--emulate-frames N] [--out /tmp/l3-bench]

With a CUDA GPU: decode GB/s and images/s for a batch of frames (the folder's
images repeated to --batch), both backends and both modes, next to CPU PNG decode
(OpenCV) and nvImageCodec when installed.

Without one: the ptxas resource report of the CUDA C kernels (NVRTC, sm_80 and
sm_90) and an ESTIMATE, computed from the real encoded frames: bytes read and
written per image, warp steps per tile (compact: per band of 32 rows), and the fraction of lane-steps that do
useful work under the kernels' schedules. Nothing there is a measurement of speed.

Everywhere: the global memory traffic of the CUDA C kernels, counted per warp
instruction by the host emulation (kernels/emulation.py) while it decodes the frames bit
for bit, and the SASS instruction counts of the sm_90 cubins (nvdisasm from the
nvidia-cuda-nvdisasm package; the section is skipped without it).

The report goes to <out>/gpu.md (default /tmp/l3-bench, so a trial run leaves the committed
bench/results/gpu.md alone) and to stdout; it names the folder, not where it is.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import l3codec  # noqa: E402
from l3codec import format as fmt  # noqa: E402

WARP = 32


def load_frames(folder: pathlib.Path) -> list:
    frames = []
    for path in sorted(folder.glob("*.png")):
        image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
        if image is not None and image.ndim == 3:
            image = np.ascontiguousarray(image[:, :, ::-1])
        if image is not None:
            frames.append(image)
    if not frames:
        raise SystemExit(f"no PNG images in {folder}")
    return frames


def gpu_present() -> bool:
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - no driver: no GPU
        return False


# ---------------------------------------------------------------- estimate (no GPU)


def compact_schedule(info: fmt.Info) -> tuple:
    """(busy lane-steps, issued lane-steps, warp steps) of the wavefront over every band of every
    tile-channel.

    A warp runs h + w - 1 steps for an h x w band (h <= 32); lane r is useful on w of them.
    """
    useful = issued = steps = 0
    for ty in range(info.tiles_y):
        tile_h = int(info.tile_rows(ty))
        for band_y in range(0, tile_h, fmt.COMPACT_BAND_ROWS):
            h = min(fmt.COMPACT_BAND_ROWS, tile_h - band_y)
            for tx in range(info.tiles_x):
                w = int(info.tile_columns(tx))
                useful += h * w * info.channels
                issued += WARP * (h + w - 1) * info.channels
                steps += (h + w - 1) * info.channels
    return useful, issued, steps


def fast_schedule(info: fmt.Info, threads: int) -> tuple:
    """(busy, issued, block steps) of the CUDA C fast kernel (kernels/fast.cu, format version 5): per
    row the head (the warps holding groups read the A bit, flags and headers, a lane per group), the
    unpack (a warp per group, each lane two samples; a Rice group's unary part ranked by its warp,
    counted as part of it), then the prediction (a thread per period of fast.PERIOD columns, every
    phase in registers); row 0 replaces the prediction by warp 0 alone, each lane a run of columns
    (two passes and a warp scan). Warps without work in a step skip it (not issued)."""
    from l3codec import fast

    busy = issued = steps = 0
    warps = threads // WARP

    def step(active, warps_issued, block_steps=1):
        nonlocal busy, issued, steps
        busy += active
        issued += WARP * warps_issued
        steps += block_steps

    for ty in range(info.tiles_y):
        h = int(info.tile_rows(ty))
        for tx in range(info.tiles_x):
            w = int(info.tile_columns(tx))
            groups = math.ceil(w / fast.GROUP_SIZE)
            sizes = [min(fast.GROUP_SIZE, w - g * fast.GROUP_SIZE) for g in range(groups)]
            pair_lanes = sum(math.ceil(n / 2) for n in sizes)
            periods = math.ceil(w / fast.PERIOD)
            per_lane = math.ceil(w / WARP)
            for _ in range(info.channels):
                for row in range(h):
                    step(groups, math.ceil(groups / WARP))  # head
                    step(pair_lanes, groups, math.ceil(groups / warps))  # unpack
                    if row == 0:
                        for _ in range(2 * per_lane + 1):
                            step(math.ceil(w / per_lane), 1)
                    else:
                        step(periods, math.ceil(periods / WARP), math.ceil(periods / threads))
    return busy, issued, steps


def estimate(frames: list, out) -> None:
    from l3codec.kernels import cuda_c

    print("## Estimate (no GPU here): from the encoded frames, not a measurement\n", file=out)
    print("Schedules of the CUDA C kernels: a lane is busy when it has a sample to decode or takes part "
          "in a scan; steps are warp steps (compact) or block-wide phases (fast; a warp with no work in a "
          "phase skips it).\n", file=out)
    print("| mode | frames | MB read / frame | MB written / frame | tiles / frame | steps / tile-channel "
          "| busy lane-steps |", file=out)
    print("|---|---|---|---|---|---|---|", file=out)
    for mode in ("compact", "fast"):
        read = written = tiles = steps = useful = issued = 0
        for frame in frames:
            data = l3codec.encode(frame, mode=mode)
            info = l3codec.info(data)
            read += len(data)
            written += frame.nbytes
            tiles += info.tiles_x * info.tiles_y
            schedule = compact_schedule(info) if mode == "compact" else fast_schedule(info, cuda_c.FAST_THREADS)
            useful += schedule[0]
            issued += schedule[1]
            steps += schedule[2] / info.channels
        n = len(frames)
        print(f"| {mode} | {n} | {read / n / 1e6:.2f} | {written / n / 1e6:.2f} | {tiles / n:.0f} | "
              f"{steps / tiles:.0f} | {useful / issued:.1%} |", file=out)
    print("\nHow many bytes the kernels actually request per compressed byte, and how whole their output "
          "sectors are, is counted in the emulated traffic section below.", file=out)


def ptxas_report(out) -> None:
    try:
        from l3codec.kernels import cuda_c
    except ImportError as error:
        print(f"\n(no CUDA C kernels: {error})", file=out)
        return
    print("\n## ptxas resource usage (NVRTC)\n", file=out)
    print(f"Register budget: {cuda_c.REGISTER_BUDGET} per thread; dynamic shared memory is sized per launch "
          "(cuda_c.shared_memory_bytes).\n", file=out)
    print("| arch | kernel | registers | stack bytes | spill stores | spill loads | static smem |", file=out)
    print("|---|---|---|---|---|---|---|", file=out)
    for arch in ("sm_80", "sm_90"):
        try:
            report = cuda_c.compile_report(arch)
        except Exception as error:  # noqa: BLE001 - report why NVRTC is unusable here
            print(f"| {arch} | NVRTC unavailable: {error} | | | | | |", file=out)
            continue
        for kernel, r in sorted(report.items()):
            print(f"| {arch} | {kernel} | {r['registers']} | {r['stack_frame']} | "
                  f"{r['spill_stores']} | {r['spill_loads']} | {r['shared']} |", file=out)
    numba_report(out)


def numba_report(out) -> None:
    """ptxas on the Numba kernels' PTX (numba.cuda.compile_ptx, linked by nvJitLink)."""
    try:
        from l3codec.kernels import numba_kernels

        report = numba_kernels.resource_report(cc=(9, 0))
    except Exception as error:  # noqa: BLE001 - report why numba-cuda or nvJitLink is unusable here
        print(f"\n(no Numba kernel report: {error})", file=out)
        return
    print("\n## ptxas resource usage of the Numba kernels (sm_90, nvJitLink)\n", file=out)
    print("Their stack bytes are the kernels' own local arrays (a compact row's adaptive state, fast's "
          "per-channel stream positions), not spills.\n", file=out)
    print("| kernel | threads per block | registers | stack bytes | spill stores | spill loads | static smem |",
          file=out)
    print("|---|---|---|---|---|---|---|", file=out)
    for kernel, r in sorted(report.items()):
        print(f"| {kernel} | {numba_kernels.LAUNCH_THREADS[kernel]} | {r['registers']} | {r['stack_frame']} | "
              f"{r['spill_stores']} | {r['spill_loads']} | {r['shared']} |", file=out)


# ---------------------------------------------------------------- emulated memory traffic (no GPU needed)

SECTOR = 32


def emulate_frames(frames: list, mode: str, **counters) -> tuple:
    """Decode each frame (one launch each) with the host emulation of the CUDA C kernels, adding to
    the counters given (traffic=, coverage=); check the result is exact. Returns (samples,
    compressed bytes)."""
    from l3codec.kernels.emulation import decode_batch_emulated

    samples = compressed = 0
    for frame in frames:
        data = ENCODERS[mode](frame)
        (image,), status = decode_batch_emulated([data], **counters)
        if status.any() or not np.array_equal(image.reshape(frame.shape), frame):
            raise SystemExit(f"emulated {mode} decode is not exact")
        samples += frame.size
        compressed += len(data)
    return samples, compressed


def traffic_report(frames: list, out) -> None:
    """Global memory traffic of the CUDA C kernels decoding each frame, counted by the host
    emulation per warp instruction (kernels/cuda_emulation.h): lanes' bytes requested, and the
    32-byte sectors each warp instruction touches, as a GPU coalesces them."""
    try:
        from l3codec.kernels.emulation import Traffic
    except Exception as error:  # noqa: BLE001 - no g++ or no emulation: say why
        print(f"\n(no emulated traffic: {error})", file=out)
        return
    print("\n## Global memory traffic, counted by the host emulation (CUDA C kernels)\n", file=out)
    print("Every load and store of the unchanged .cu files, executed by the host emulation while it decodes "
          "each frame bit for bit (checked), one frame per launch. A warp instruction is the k-th "
          "execution of one instruction by the lanes of a warp between two of their rendezvous points; its "
          "sectors are the distinct 32-byte sectors its lanes touch. Input: the compressed bytes (the whole "
          "files); output: the decoded pixels. Table loads (stream offsets, item and task records) are "
          "counted where g++ reloads them, which nvcc may keep in registers: an upper bound.\n", file=out)
    print("| mode | frames | input bytes requested / compressed byte | input sectors x 32 / compressed byte "
          "| input warp loads / sample | sectors / input warp load | table bytes / sample "
          "| output bytes stored / output byte | sectors written / output byte (ideal 1/32) "
          "| whole sectors / sectors written |", file=out)
    print("|---|---|---|---|---|---|---|---|---|---|", file=out)
    for mode in ("compact", "fast"):
        traffic = Traffic()
        samples, compressed = emulate_frames(frames, mode, traffic=traffic)
        output = sum(frame.nbytes for frame in frames)
        count = traffic.get
        table_regions = ("stream_starts", "stream_ends", "items", "tasks")
        tables = sum(count(region, False, "bytes") for region in table_regions)
        loads = count("data", False, "instructions")
        written = count("out", True, "sectors")
        print(f"| {mode} | {len(frames)} | {count('data', False, 'bytes') / compressed:.2f} | "
              f"{count('data', False, 'sectors') * SECTOR / compressed:.2f} | {loads / samples:.3f} | "
              f"{count('data', False, 'sectors') / max(loads, 1):.2f} | {tables / samples:.3f} | "
              f"{count('out', True, 'bytes') / output:.3f} | {written / output:.4f} | "
              f"{count('out', True, 'full_sectors') / max(written, 1):.1%} |", file=out)


# ---------------------------------------------------------------- SASS (no GPU needed)

_SASS_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
_SASS_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(.+?)\s*;")
_SASS_FUNCTION = re.compile(r"^(\w+):$")
_SASS_SUBROUTINE = re.compile(r"^\s*\.type\s+\S+,@function")
_SASS_LABEL = re.compile(r"^(\.L_x_\d+):")
_SASS_DIVERGED_BRANCH = re.compile(r"^BRA\.DIV\s.*`\((\.L_x_\d+)\)")
_SASS_UNCONDITIONAL_BRANCH = re.compile(r"^BRA\s")
_SOURCE_FUNCTION = re.compile(r"^(?:L3_DEVICE|L3_HOST_DEVICE)\s.*?(\w+)\(")


def find_nvdisasm():
    """nvdisasm on PATH or from the nvidia-cuda-nvdisasm wheel, else None."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for candidate in sorted(pathlib.Path(root).glob("*/bin/nvdisasm")):
            return str(candidate)
    return None


def source_functions(path: pathlib.Path) -> list:
    """[(first line, name)] of the device functions of a kernel source, in line order; a line
    belongs to the last function starting at or before it (the kernel macro's line is 'kernel')."""
    functions = [(0, "(file scope)")]
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = _SOURCE_FUNCTION.match(line)
        if match:
            functions.append((number, match.group(1)))
        elif line.startswith("L3_DECODE_KERNEL("):
            functions.append((number, "kernel entry"))
    return functions


def sass_by_function(text: str) -> dict:
    """{kernel: {(file name, source function): SASS instructions}} from `nvdisasm -gi` output,
    each instruction counted at the innermost source line nvdisasm gives it."""
    functions = {}
    counts = {}
    for kernel, chain in sass_instructions(text):
        path, number = chain[0]
        if path not in functions:
            functions[path] = source_functions(path) if path.exists() else [(0, "?")]
        name = [n for first, n in functions[path] if first <= number][-1]
        by_function = counts.setdefault(kernel, {})
        by_function[(path.name, name)] = by_function.get((path.name, name), 0) + 1
    return counts


def sass_instructions(text: str, converged: bool = False):
    """(kernel, chain) of every SASS instruction (NOPs left out) in `nvdisasm -gi` output; chain:
    ((source path, line), ...) from the innermost inlined line out to the kernel's own. converged:
    leave out the blocks a BRA.DIV jumps to, from their label to their unconditional BRA back (a
    warp shuffle's path for a warp that reaches it diverged, which the emulation never takes: a
    shuffle there waits for every lane of its mask)."""
    kernel, chain, chain_done = None, ((pathlib.Path("?"), 0),), True
    diverged_targets, in_diverged = set(), False
    for line in text.splitlines():
        label = _SASS_LABEL.match(line)
        if converged and label and label.group(1) in diverged_targets:
            in_diverged = True
        instruction = _SASS_INSTRUCTION.match(line)
        if instruction:
            target = _SASS_DIVERGED_BRANCH.search(instruction.group(1))
            if target:
                diverged_targets.add(target.group(1))
            if in_diverged:
                in_diverged = not _SASS_UNCONDITIONAL_BRANCH.match(instruction.group(1))
                chain_done = True
                continue
        match = _SASS_FUNCTION.match(line)
        if match and not line.startswith("."):
            kernel = match.group(1)
            continue
        if _SASS_SUBROUTINE.match(line):  # a compiler helper (64-bit division) without line info:
            chain, chain_done = ((pathlib.Path("?"), 0),), True  # not the last line before it
            continue
        found = _SASS_LINE.search(line)
        if found:  # consecutive comment lines: the inline stack, innermost first
            place = (pathlib.Path(found.group(1)), int(found.group(2)))
            chain = (place,) if chain_done else (*chain, place)
            chain_done = False
            continue
        if kernel and _SASS_INSTRUCTION.match(line):
            chain_done = True
            if "NOP" not in line:
                yield kernel, chain


def disassemble_sass(filename: str, nvdisasm: str) -> str:
    """`nvdisasm -gi` of kernels/<filename> compiled by NVRTC for sm_90 with -lineinfo."""
    from l3codec.kernels import cuda_c

    cubin, _ = cuda_c.nvrtc_compile(filename, "sm_90", ("-lineinfo",))
    with tempfile.TemporaryDirectory() as directory:
        path = pathlib.Path(directory) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run([nvdisasm, "-gi", "-c", str(path)], capture_output=True, text=True,
                              check=True).stdout


def sass_report(out) -> dict:
    """Static SASS instruction counts of the CUDA C kernels for sm_90, by source function.
    Returns {kernel: {((source name, line), ... out to the kernel's line): instructions}}."""
    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        print("\n(no SASS counts: nvdisasm not found; pip install nvidia-cuda-nvdisasm)", file=out)
        return {}
    from l3codec.kernels import cuda_c

    print("\n## SASS instructions of the CUDA C kernels (sm_90, static)\n", file=out)
    print("NVRTC with the project's options plus -lineinfo (which does not change the code) to a cubin, "
          "`nvdisasm -gi`; each instruction is counted once at the innermost source line it is attributed "
          "to, so a function inlined three times counts three copies, and both sample sizes (8- and 16-bit "
          "instantiations) are in the kernel: the code's size, not instructions run per sample.\n", file=out)
    print("| kernel | source function | SASS instructions | share |", file=out)
    print("|---|---|---|---|", file=out)
    by_line, mixes = {}, {}
    for filename in cuda_c.SOURCES:
        text = disassemble_sass(filename, nvdisasm)
        for kernel, chain in sass_instructions(text, converged=True):
            key = tuple((path.name, number) for path, number in chain)
            lines = by_line.setdefault(kernel, {})
            lines[key] = lines.get(key, 0) + 1
        for kernel, by_function in sorted(sass_by_function(text).items()):
            total = sum(by_function.values())
            print(f"| {kernel} | all | {total} | 100% |", file=out)
            for (source, function), n in sorted(by_function.items(), key=lambda item: -item[1]):
                print(f"| {kernel} | {source}: {function} | {n} | {n / total:.1%} |", file=out)
        mixes[filename] = sass_mix(text)
    print("\nStatic mix by pipe (16 lanes per partition on sm_90: a warp-instruction every other cycle) "
          "and the issue per cycle per SM those pipes allow:\n", file=out)
    shares = " | ".join(f"{pipe} share" for pipe in PIPE_LANES)
    print(f"| source | {shares} | pipe ceiling per SM |", file=out)
    print("|---|" + "---|" * (len(PIPE_LANES) + 1), file=out)
    for filename, mix in mixes.items():
        print(f"| {filename} | " + " | ".join(f"{share:.0%}" for share in mix.values())
              + f" | {pipe_ceiling(mix):.1f} |", file=out)
    return by_line


# ---------------------------------------------------------------- SASS per sample, weighted by emulated paths

_OBJDUMP_FUNCTION = re.compile(r"^[0-9a-f]+ <(.+)>:$")
_OBJDUMP_INSTRUCTION = re.compile(r"^\s+([0-9a-f]+):\s+(.*)$")
MODE_KERNELS = {"compact": ("l3_decode_compact", "compact.cu"), "fast": ("l3_decode_fast", "fast.cu"),
                "compact kind 10": ("l3_decode_compact", "compact.cu")}
# the LZ streams' expansion, which runs before either mode's decode (kernels/lz.cu), and the kind-10 streams'
# table stage (kernels/ans.cu), priced alike
KERNELS = {**MODE_KERNELS, "expansion": ("l3_expand_lz", "lz.cu"),
           "tables": ("l3_build_ans_tables", "ans.cu")}
_KERNEL_SOURCES = ("compact.cu", "fast.cu", "lz.cu", "ans.cu", "l3_common.cuh", "ans.cuh")


KIND10_TILE = (512, 256)  # tables per 256-row tile: the measured design point (results/compact-v2-model.md)


def encode_kind10(frame) -> bytes:
    """frame in compact mode, 512x256 tiles, with every tile-channel the encoder codes (kinds 0-2) rewritten
    as format 10's kind 10 by the reference encoder (ans_cpu.encode_stream, through tests/ans_streams.py):
    encode() does not write kind 10 yet."""
    sys.path.insert(0, str(REPO / "tests"))
    from ans_streams import with_ans_streams

    data = l3codec.encode(frame, mode="compact", tile_width=KIND10_TILE[0], tile_height=KIND10_TILE[1])
    return with_ans_streams(data, set(range(len(fmt.parse(data).stream_starts))))


# how each row of the per-sample table encodes its frames
ENCODERS = {"compact": lambda frame: l3codec.encode(frame, mode="compact"),
            "fast": lambda frame: l3codec.encode(frame, mode="fast"),
            "compact kind 10": encode_kind10}


def host_blocks(library_path: str) -> dict:
    """The basic blocks of the coverage build's kernels, as ({mode: {block offset: [(key, share)]}},
    {mode: {key: copies}}): a key is the inline stack of source lines ((name, line), ...) from the
    innermost out, as nvdisasm gives them for SASS; share: the part of one copy of the key's
    instructions that the block holds; copies: how many instantiations hold the key."""
    disassembly = subprocess.run(["objdump", "-d", "--no-show-raw-insn", library_path], capture_output=True,
                                 text=True, check=True).stdout
    block_of, pending, block, after_call, function = {}, [], None, False, ""
    for line in disassembly.splitlines():
        match = _OBJDUMP_FUNCTION.match(line)
        if match:
            function, block, pending = match.group(1), None, []
            continue
        match = _OBJDUMP_INSTRUCTION.match(line)
        if not match or "l3" not in function or function.startswith("l3emu"):
            continue
        address, text = int(match.group(1), 16), match.group(2)
        if text.startswith("call") and "<__sanitizer_cov_trace_pc@plt>" in text:
            after_call = True
            continue
        if after_call:  # the callback returns here: this block's key (a prologue before it joins it)
            block, after_call = address, False
            for earlier in pending:
                block_of[earlier] = block
            pending = []
        if block is None:
            pending.append(address)
        else:
            block_of[address] = block
    addresses = sorted(block_of)
    lookup = subprocess.run(["addr2line", "-a", "-i", "-f", "-e", library_path],
                            input="\n".join(map(hex, addresses)), capture_output=True, text=True,
                            check=True).stdout.splitlines()
    keys = {kernel: {} for kernel in KERNELS}
    copies = {kernel: {} for kernel in KERNELS}
    index = 0
    for address in addresses:
        assert lookup[index].startswith("0x"), lookup[index]
        index += 1
        chain = []  # (function, file name, line), innermost first
        while index < len(lookup) and not lookup[index].startswith("0x"):
            name, place = lookup[index], lookup[index + 1].split(" (")[0]
            file, _, number = place.rpartition(":")
            chain.append((name, pathlib.Path(file).name, int(number) if number.isdigit() else 0))
            index += 2
        if not chain or chain[0][1] not in _KERNEL_SOURCES:
            continue
        mode = next((m for m, (kernel, source) in KERNELS.items()  # a kernel's first row: "compact" for both
                     if chain[-1][0] == kernel or chain[-1][1] == source), None)
        if mode is None:
            continue
        key = tuple((name, number) for _, name, number in chain)
        copy = tuple(function for function, _, _ in chain)
        per_block = copies[mode].setdefault(key, {}).setdefault(copy, {})
        per_block[block_of[address]] = per_block.get(block_of[address], 0) + 1
    # a block runs the share of a line's copy that its instructions are (g++ spreads a line over
    # blocks and hoists fragments of it into blocks that run more often)
    for mode, by_key in copies.items():
        for key, by_copy in by_key.items():
            for per_block in by_copy.values():
                total = sum(per_block.values())
                for block, n in per_block.items():
                    keys[mode].setdefault(block, []).append((key, n / total))
    for mode, (kernel, _) in KERNELS.items():  # rows sharing a kernel share its blocks
        first = next(m for m, (k, _) in KERNELS.items() if k == kernel)
        keys[mode], copies[mode] = keys[first], copies[first]
    return keys, {mode: {key: len(c) for key, c in by_key.items()} for mode, by_key in copies.items()}


def sass_per_sample_report(frames: list, sass_lines: dict, out) -> dict:
    """ESTIMATED warp-instructions per sample: the sm_90 SASS of each source line (per inlined copy),
    times how often warps ran that line while the coverage build decoded the frames. Returns {mode:
    warp-instructions per sample with the LZ expansion}, empty where it cannot price them."""
    try:
        from l3codec.kernels.emulation import WarpCoverage
    except Exception as error:  # noqa: BLE001 - no g++ or no emulation: say why
        print(f"\n(no SASS per sample: {error})", file=out)
        return {}
    if not sass_lines:
        return {}
    print("\n## SASS warp-instructions per sample, weighted by the emulated paths (ESTIMATE)\n", file=out)
    print("How it is computed: the host emulation's coverage build (g++ -fsanitize-coverage=trace-pc) counts "
          "how often each basic block runs as a warp while it decodes the frames: the k-th run by the lanes "
          "of a warp between two rendezvous points is one warp run, so divergent paths add up as on a GPU "
          "(this is the frames' own sample-path mix: runs, run ends, interruptions, regular samples). Each "
          "block's source lines (with the lines they are inlined at, from DWARF) are priced with the sm_90 "
          "SASS nvdisasm attributes to the same inline stack, divided by the number of instantiations "
          "holding it (both sample sizes are); a g++ block that holds a fraction of a line's instructions "
          "runs that fraction of the line. The sum is divided by the samples decoded (pixels x channels). "
          "Loops the kernels ask nvcc to unroll (L3_UNROLL) are unrolled by g++ as well, so they are priced "
          "once per iteration. An ESTIMATE, biased high where nvcc makes copies of a line on its own "
          "(peeled or unswitched loops): every copy is priced as if it ran. Unmatched SASS (lines g++ "
          "inlines differently) is left out, and so are the blocks a BRA.DIV jumps to (a shuffle's path "
          "for a diverged warp; the emulation's shuffles wait for every lane) and compiler subroutines "
          "without line information. Write-out: the lines of write_tile_sectors and what it inlines. The LZ "
          "expansion column holds the kind-10 table stage (kernels/ans.cu) too. Kind 10: the compact frames "
          "in 512x256 tiles, every coded tile-channel rewritten as kind 10 by the reference encoder.\n", file=out)
    # the "LZ expansion" column holds the kind-10 table stage too (gpu_check_kernels reads it by this name)
    print("| mode | frames | warp-instructions per sample | of which write-out | LZ expansion (its kernel) "
          "| SASS not matched to a line the emulation ran | top source lines (instructions per sample) |", file=out)
    print("|---|---|---|---|---|---|---|", file=out)
    per_sample = {}
    for mode, (kernel, _) in MODE_KERNELS.items():
        coverage = WarpCoverage()
        samples, _ = emulate_frames(frames, mode, coverage=coverage)
        keys, copies = host_blocks(coverage.library_path)

        def priced(name):  # {inline stack: warp-instructions run} of a kernel of KERNELS, and its SASS
            runs_by_key = {}
            for block, runs in coverage.runs.items():
                for key, share in keys[name].get(block, ()):
                    runs_by_key[key] = runs_by_key.get(key, 0) + runs * share
            sass = sass_lines.get(KERNELS[name][0], {})
            return {key: runs * sass[key] / copies[name][key] for key, runs in runs_by_key.items() if key in sass}, sass

        cost, sass = priced(mode)
        expansion_cost = priced("expansion")[0]
        tables_cost = priced("tables")[0]  # the kind-10 table stage, counted with the expansion
        expansion = (sum(expansion_cost.values()) + sum(tables_cost.values())) / samples
        unmatched = sum(n for key, n in sass.items() if key not in copies[mode])
        write_out = sum(c for key, c in cost.items() if _in_write_out(key))
        top = sorted(cost.items(), key=lambda item: -item[1])[:5]
        described = ", ".join(" < ".join(f"{name}:{number}" for name, number in k[:2]) + f" {c / samples:.2f}"
                              for k, c in top)
        if os.environ.get("L3_SASS_LINES"):  # every priced line, for a closer look
            for label, lines in ((mode, cost), (f"{mode} expansion", expansion_cost),
                                 (f"{mode} tables", tables_cost)):
                for key, c in sorted(lines.items(), key=lambda item: -item[1]):
                    print(label, " < ".join(f"{name}:{number}" for name, number in key[:3]), f"{c / samples:.3f}",
                          file=sys.stderr)
        print(f"| {mode} | {len(frames)} | {sum(cost.values()) / samples:.2f} | {write_out / samples:.2f} | "
              f"{expansion:.2f} | {unmatched / max(sum(sass.values()), 1):.0%} | {described} |", file=out)
        per_sample[mode] = sum(cost.values()) / samples + expansion
    throughput_estimate(per_sample, out)
    return per_sample


# H100 SXM: 132 SMs at a 1.755 GHz sustained clock, 4 partitions (schedulers) per SM, each issuing at most
# one warp-instruction a cycle. Pipes (sm_90): IMAD and the integer ALU (IADD3, LOP3, ISETP, SHF, SEL ...)
# are 16 lanes per partition, so a warp-instruction holds either for two cycles; the kernels' static SASS
# is 24-27% IMAD and 44-47% integer ALU (sass_report's mix), so the ALU pipe alone caps a partition at
# about one warp-instruction a cycle: the pipes allow 4 per SM (pipe_ceiling), no more. Sustained issue is
# ASSUMED to be 1.5-2.3 per SM, 38-58% of that ceiling: the bit readers' dependent loads and shuffles
# stall warps, and too few warps hide them at small batches. Not measured: ncu on a GPU says.
H100_SMS, H100_CLOCK_HZ, PARTITIONS, ISSUE_PER_CYCLE = 132, 1.755e9, 4, (1.5, 2.3)
PIPE_LANES = {"IMAD": 16, "integer ALU": 16}  # per partition, sm_90; a warp is 32 lanes
_ALU_OPS = ("IADD3", "LOP3", "ISETP", "SHF", "SEL", "LEA", "PRMT", "IABS", "FLO", "POPC", "BREV", "VIADD",
            "IMNMX", "VIMNMX", "PLOP3", "P2R", "R2P", "SGXT", "BMSK", "MOV")


def sass_mix(text: str) -> dict:
    """{pipe: share of the SASS instructions} of `nvdisasm` text, for the pipes of PIPE_LANES."""
    counts = {pipe: 0 for pipe in PIPE_LANES}
    total = 0
    for line in text.splitlines():
        match = _SASS_INSTRUCTION.match(line)
        if not match:
            continue
        instruction = match.group(1)
        opcode = instruction.split()[1 if instruction.startswith("@") else 0].split(".")[0]
        if opcode == "NOP":
            continue
        total += 1
        if opcode == "IMAD":
            counts["IMAD"] += 1
        elif opcode in _ALU_OPS:
            counts["integer ALU"] += 1
    return {pipe: n / max(total, 1) for pipe, n in counts.items()}


def pipe_ceiling(mix: dict) -> float:
    """Warp-instructions per cycle per SM the pipes allow for an instruction mix (every other limit aside)."""
    per_partition = min([1.0] + [PIPE_LANES[pipe] / WARP / share for pipe, share in mix.items() if share > 0])
    return PARTITIONS * per_partition


def throughput_estimate(per_sample: dict, out) -> None:
    """Decoded GB/s on one H100 implied by the warp-instructions per sample (decode and LZ expansion), for a
    range of instructions per cycle; 8-bit samples (one byte each), issue-bound, memory and latency free."""
    print("\n## Decoded output on one H100 implied by those counts (ESTIMATE)\n", file=out)
    print(f"Assumed: {H100_SMS} SMs at {H100_CLOCK_HZ / 1e9:.3f} GHz, {ISSUE_PER_CYCLE[0]:g} to "
          f"{ISSUE_PER_CYCLE[1]:g} warp-instructions issued per cycle per SM sustained: IMAD and the integer "
          "ALU are 16 lanes per partition on sm_90 (a warp-instruction every other cycle each), and with the "
          "static mix above they allow about 4 (the pipe ceiling); the range assumes 38-58% of it, for "
          "the dependent stalls of the bit readers. GB/s = SMs x clock x issue rate / warp-instructions per "
          "sample (the decode's and the LZ expansion's), one byte per sample. Issue-bound only: the "
          "latency floors below add to it.\n", file=out)
    print(f"| mode | warp-instructions per sample, with LZ expansion | GB/s at {ISSUE_PER_CYCLE[0]:g} per cycle "
          f"| GB/s at {ISSUE_PER_CYCLE[1]:g} per cycle |", file=out)
    print("|---|---|---|---|", file=out)
    for mode, count in per_sample.items():
        low, high = (H100_SMS * H100_CLOCK_HZ * rate / count / 1e9 for rate in ISSUE_PER_CYCLE)
        print(f"| {mode} | {count:.2f} | {low:.0f} | {high:.0f} |", file=out)


BATCHES = (1, 4, 16)  # frames per batch in floors_report's expected range


def floors_report(frames: list, per_sample: dict, out) -> None:
    """The dependent-latency floors of a batch of the frames (bench/latency_floors.py: the LZ chain, a
    compact band's steps, the per-batch costs) and, where the warp-instructions per sample are known,
    the range of decoded GB/s they leave for batches of BATCHES frames: per-batch costs + the LZ chain
    (the expansion runs before the decode) + the larger of the band floor and the issue-bound time."""
    sys.path.insert(0, str(REPO / "bench"))
    import latency_floors as floors

    from l3codec import batch as l3batch

    print("\n## Dependent-latency floors, and the range they leave (ESTIMATE)\n", file=out)
    def pair(values, scale=1):
        return f"{values[0] * scale:g}-{values[1] * scale:g}"

    print(f"Assumed (H100, not measured): a copy round of the LZ expansion {pair(floors.ROUND_TRIP_CYCLES)} "
          "cycles (a dependent load of output written before: an L2 hit to DRAM), a read of the stream "
          f"itself {pair(floors.STREAM_READ_CYCLES)} (sequential: mostly L1 hits), a coded symbol "
          f"{pair(floors.SYMBOL_CYCLES)}, a compact wavefront step {pair(floors.BAND_STEP_CYCLES)}; per "
          f"batch {pair(floors.LAUNCH_SECONDS, 1e6)} us a launch, the files copied in at "
          f"{pair(floors.COPY_BYTES_PER_SECOND[::-1], 1e-9)} GB/s, "
          f"{pair(floors.STATUS_READ_SECONDS, 1e6)} us for the status read back. The LZ chain is the batch's "
          f"longest stream (a warp each, all at once), with the copy at {floors.LANE_BYTES} bytes a lane "
          "(lz_copy_warp) and, for comparison, at 1 (the copy before it). The issue-bound time assumes the "
          "batch fills the SMs.\n", file=out)
    print("| mode | frames per batch | per-batch costs ms | LZ chain ms (1-byte copy) | band floor ms "
          "| issue-bound ms | decoded GB/s | GB/s with the 1-byte copy |", file=out)
    print("|---|---|---|---|---|---|---|---|", file=out)

    def span(low_high, scale=1e3):
        return f"{low_high[0] * scale:.2f}-{low_high[1] * scale:.2f}"

    for mode in ("compact", "fast"):
        files = [l3codec.encode(frame, mode=mode) for frame in frames]
        chains = [max(floors.batch_lz_chains([data]) or [floors.LzChain()], key=lambda c: c.seconds()[1])
                  for data in files]
        band = max((floors.band_floor_seconds(l3codec.info(data)) for data in files), key=lambda b: b[1])
        for count in BATCHES:
            batch = [files[i % len(files)] for i in range(count)]
            prepared = l3batch.prepare(batch)
            launches = len(prepared.launches) + (prepared.lz is not None)
            fixed = floors.fixed_seconds(batch, launches)
            chain = max(chains[: min(count, len(files))], key=lambda c: c.seconds()[1])
            now, before = chain.seconds(), chain.seconds(before=True)
            samples = sum(frames[i % len(frames)].size for i in range(count))
            if mode in per_sample:
                issue = tuple(samples * per_sample[mode] / (H100_SMS * H100_CLOCK_HZ * rate)
                              for rate in ISSUE_PER_CYCLE[::-1])
                rates = []
                for lz in (now, before):
                    seconds = [fixed[i] + lz[i] + max(band[i], issue[i]) for i in (0, 1)]
                    rates.append(f"{samples / seconds[1] / 1e9:.0f}-{samples / seconds[0] / 1e9:.0f}")
                issue_text = span(issue)
            else:
                issue_text, rates = "(not emulated)", ["", ""]
            print(f"| {mode} | {count} | {span(fixed)} | {span(now)} ({span(before)}) | {span(band)} | "
                  f"{issue_text} | {rates[0]} | {rates[1]} |", file=out)


_WRITE_OUT = ("write_tile_sectors",)
_kernel_functions = {}


def _in_write_out(key) -> bool:
    """Whether an inline stack ((source name, line), ...) runs inside one of the write-out functions."""
    for name, number in key:
        if name not in _kernel_functions:
            path = REPO / "kernels" / name
            _kernel_functions[name] = source_functions(path) if path.exists() else [(0, "?")]
        if [n for first, n in _kernel_functions[name] if first <= number][-1] in _WRITE_OUT:
            return True
    return False


# ---------------------------------------------------------------- measurement (GPU)


def kernel_seconds(items: list, backend: str, repeat: int) -> float:
    """Best time of the launches alone (CUDA events around launch_packed), the packed batch
    copied to the device once beforehand; the first launch (compiling, loading) is not timed."""
    from l3codec import batch as batching
    from l3codec import gpu

    prepared = gpu.prepare(items)
    layout = batching.packed_layout(prepared)
    host = np.zeros(max(layout.device_size, 1), np.uint8)  # the packed batch, then its LZ scratch area
    batching.write_packed(prepared, layout, host)
    best = math.inf
    if backend == "cupy":
        import cupy

        buffer, out = cupy.asarray(host), cupy.empty(max(prepared.out_size, 1), np.uint8)
        status = cupy.zeros(len(prepared.infos), np.int32)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        for attempt in range(repeat + 1):
            start.record()
            gpu.launch_packed(prepared, layout, buffer, out, status, backend="cupy")
            end.record()
            end.synchronize()
            if attempt:
                best = min(best, cupy.cuda.get_elapsed_time(start, end) / 1e3)
        return best
    from numba import cuda

    stream = cuda.stream()
    buffer, out = cuda.to_device(host, stream=stream), cuda.device_array(max(prepared.out_size, 1), np.uint8)
    status = cuda.to_device(np.zeros(len(prepared.infos), np.int32), stream=stream)
    start, end = cuda.event(), cuda.event()
    for attempt in range(repeat + 1):
        start.record(stream)
        gpu.launch_packed(prepared, layout, buffer, out, status, backend="numba", stream=stream)
        end.record(stream)
        end.synchronize()
        if attempt:
            best = min(best, start.elapsed_time(end) / 1e3)  # milliseconds
    return best


def device_name(device) -> str:
    """A Numba device's name: bytes before numba-cuda 0.30, str from it."""
    name = device.name
    return name.decode() if isinstance(name, bytes) else name


def measure(frames: list, batch: int, repeat: int, out) -> None:
    from numba import cuda

    from l3codec import gpu

    items = [frames[i % len(frames)] for i in range(batch)]
    raw = sum(f.nbytes for f in items)
    print(f"## Measured on {device_name(cuda.get_current_device())}: batch of {batch}\n", file=out)
    print("Kernels: the launches alone, timed with CUDA events, the packed batch already on the device. "
          "End to end: decode_batch from host bytes (validation and checksums, packing, one copy, the "
          "launches, the status read back), timed on the host.\n", file=out)
    print("| decoder | kernels: images/s | kernels: output GB/s | end to end: images/s | end to end: output GB/s |",
          file=out)
    print("|---|---|---|---|---|", file=out)
    for mode in ("compact", "fast"):
        datas = [l3codec.encode(f, mode=mode) for f in frames]
        batch_items = [datas[i % len(datas)] for i in range(batch)]
        for backend in gpu.BACKENDS:
            try:
                kernels = kernel_seconds(batch_items, backend, repeat)
                gpu.decode_batch(batch_items, backend=backend)
                best = math.inf
                for _ in range(repeat):
                    start = time.perf_counter()
                    gpu.decode_batch(batch_items, backend=backend)
                    cuda.synchronize()
                    best = min(best, time.perf_counter() - start)
                print(f"| l3 {mode}, {backend} | {batch / kernels:.0f} | {raw / kernels / 1e9:.2f} | "
                      f"{batch / best:.0f} | {raw / best / 1e9:.2f} |", file=out)
            except Exception as error:  # noqa: BLE001 - one backend failing must not hide the others
                print(f"| l3 {mode}, {backend} | failed: {error} | | | |", file=out)
    pngs = [cv2.imencode(".png", f)[1] for f in frames]
    start = time.perf_counter()
    for i in range(batch):
        cv2.imdecode(pngs[i % len(pngs)], cv2.IMREAD_UNCHANGED)
    elapsed = time.perf_counter() - start
    print(f"| PNG, OpenCV, CPU 1 thread | {batch / elapsed:.0f} | {raw / elapsed / 1e9:.2f} |", file=out)
    try:
        from nvidia import nvimgcodec
    except ImportError:
        print("\n(nvImageCodec not installed: no nvImageCodec row)", file=out)
        return
    decoder = nvimgcodec.Decoder()
    encoded = [bytes(pngs[i % len(pngs)]) for i in range(batch)]
    decoder.decode(encoded)
    start = time.perf_counter()
    decoder.decode(encoded)
    cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"| PNG, nvImageCodec | {batch / elapsed:.0f} | {raw / elapsed / 1e9:.2f} |", file=out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", default=str(REPO.parent / "shared" / "corpus" / "hires2048"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--emulate-frames", type=int, default=None,
                        help="emulate only the first N frames for the traffic and path counts (default: all; "
                        "a 2048x1024 frame takes minutes)")
    parser.add_argument("--out", default="/tmp/l3-bench",
                        help="folder for gpu.md (name bench/results to replace the committed one)")
    args = parser.parse_args()
    folder = pathlib.Path(args.folder)
    frames = load_frames(folder)
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "gpu.md"
    with open(path, "w") as out:
        print(f"# GPU decode\n\nFolder `{folder.name}`: {len(frames)} frames of {frames[0].shape}.\n",
              file=out)
        if gpu_present():
            measure(frames, args.batch, args.repeat, out)
        else:
            estimate(frames, out)
        emulated = frames[: args.emulate_frames]
        if emulated:  # --emulate-frames 0: no emulation (minutes a frame), so timings come at once
            traffic_report(emulated, out)
        ptxas_report(out)
        sass_lines = sass_report(out)
        per_sample = sass_per_sample_report(emulated, sass_lines, out) if emulated else {}
        floors_report(frames, per_sample, out)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
