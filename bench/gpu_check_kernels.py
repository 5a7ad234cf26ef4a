"""The kernel-level steps of bench/gpu_check.py: one CuPy batch against the CPU decoder with blocks
per SM (step_smoke), CUDA-event timings of each launch (step_timings), ncu's counters (step_ncu),
and what they stand on.

time_launches launches one packed batch launch by launch with an event between launches, on a
device adapter: CupyDevice (the CUDA C kernels through kernels/cuda_c.py) or EmulatedDevice, the
host stand-in, which runs the same kernels through the host emulation (kernels/emulation.py) with
numpy arrays and wall-clock "events", so that a machine without a GPU runs every line of it and
checks the output against the CPU decoder; its times are the emulator's, never a GPU's.
"""

from __future__ import annotations

import csv
import functools
import itertools
import json
import pathlib
import statistics
import subprocess
import sys
import time

import gpu_check_data as data
import numpy as np

from l3codec import batch as batching

BATCHES, QUICK_BATCHES, STAND_IN_BATCHES = (1, 4, 16, 64), (1, 4, 16), (1, 2)
LABEL_BATCH = 16  # label maps: a batch with many LZ streams to expand
REPEAT, STAND_IN_REPEAT = 5, 1
END_TO_END_REPEAT = 3
MODES = ("compact", "fast")
EXPANSION = "LZ expansion"
ANS_TABLES = "kind-10 tables"  # the rANS table stage (kernels/ans.cu), counted with the expansion
STAGES = (EXPANSION, ANS_TABLES)
ESTIMATE_REPORT = data.REPO / "bench" / "results" / "gpu.md"
# sm_90 (H100, H200) per-SM limits, for the stand-in where no device reports its own
SM90_LIMITS = {"blocks": 32, "threads": 2048, "registers": 65536, "shared": 233472, "reserved_shared": 1024}


# ---------------------------------------------------------------- device adapters

class CupyDevice:
    """The CUDA C kernels through CuPy (kernels/cuda_c.py), on the current device and stream."""

    name = "cupy"

    def __init__(self):
        import cupy

        from l3codec.kernels import cuda_c

        self.cupy, self.cuda_c = cupy, cuda_c

    def upload(self, host: np.ndarray):
        return self.cupy.asarray(host)

    def zeros(self, count: int, dtype):
        return self.cupy.zeros(count, dtype)

    def download(self, array) -> np.ndarray:
        return self.cupy.asnumpy(array)

    def event(self):
        return self.cupy.cuda.Event()

    def elapsed_ms(self, start, end) -> float:
        return float(self.cupy.cuda.get_elapsed_time(start, end))

    def expand(self, buffer, expansions, status) -> None:
        self.cuda_c.launch_expand(buffer, expansions, status)

    def build_ans_tables(self, buffer, tables) -> None:
        self.cuda_c.launch_ans_tables(buffer, tables)

    def decode(self, launch, buffer, starts, ends, out, status, items, tasks) -> None:
        self.cuda_c.launch(launch, buffer, starts, ends, out, status, items=items, tasks=tasks)

    def decode_batch(self, items: list) -> None:
        from l3codec import gpu

        gpu.decode_batch(items, backend="cupy")  # returns once the status is read back


class HostEvent:
    """A wall-clock stand-in for a CUDA event."""

    seconds = 0.0

    def record(self) -> None:
        self.seconds = time.perf_counter()

    def synchronize(self) -> None:
        pass


class EmulatedDevice:
    """CuPy-free stand-in: numpy arrays; the kernels run by the host emulation, in order."""

    name = "emulator (host stand-in)"

    def upload(self, host: np.ndarray) -> np.ndarray:
        return np.array(host)

    def zeros(self, count: int, dtype) -> np.ndarray:
        return np.zeros(count, dtype)

    def download(self, array) -> np.ndarray:
        return np.array(array)

    def event(self) -> HostEvent:
        return HostEvent()

    def elapsed_ms(self, start: HostEvent, end: HostEvent) -> float:
        return (end.seconds - start.seconds) * 1e3

    def expand(self, buffer, expansions, status) -> None:
        from l3codec.kernels import emulation

        emulation.expand_emulated(buffer, expansions, status)

    def build_ans_tables(self, buffer, tables) -> None:
        from l3codec.kernels import emulation

        emulation.build_ans_tables_emulated(buffer, tables)

    def decode(self, launch, buffer, starts, ends, out, status, items, tasks) -> None:
        from l3codec.kernels import cuda_c, emulation

        arrays = (buffer, starts, ends, items, tasks, out, status)
        if not all(array.flags.c_contiguous for array in arrays):
            raise ValueError("the emulated launch needs contiguous views of the packed buffer")
        library = emulation.kernel_library()
        result = library.l3emu_launch(
            emulation.KERNEL_INDEX[launch.mode], len(tasks), *cuda_c.block_shape(launch),
            cuda_c.shared_memory_bytes(launch), emulation.ORDERS["forward"], 0, buffer.ctypes.data,
            buffer.size, starts.ctypes.data, ends.ctypes.data, items.ctypes.data, tasks.ctypes.data,
            len(tasks), out.ctypes.data, status.ctypes.data)
        if result != 0:
            raise RuntimeError(f"{cuda_c.kernel_name(launch)} under the emulator: "
                               f"{library.l3emu_last_error().decode()}")

    def decode_batch(self, items: list) -> None:
        from l3codec.kernels import emulation

        emulation.decode_batch_emulated(items)


def launch_label(launch) -> str:
    from l3codec.format import MODE_COMPACT

    return f"decode {'compact' if launch.mode == MODE_COMPACT else 'fast'} {launch.max_channels} ch"


def time_launches(device, items: list, repeat: int) -> dict:
    """The batch packed and copied to the device once, then launched repeat + 1 times (the first
    untimed: compiling, loading) as gpu.launch_packed launches it, with an event before and after
    each launch. Returns per-launch and whole-batch milliseconds (min and median), the samples each
    launch decodes, the status codes and the decoded images on the host."""
    prepared = batching.prepare(items, verify=False)
    layout = batching.packed_layout(prepared)
    host = np.zeros(max(layout.device_size, 1), np.uint8)  # the packed batch, then its LZ scratch area
    batching.write_packed(prepared, layout, host)
    buffer, out = device.upload(host), device.zeros(max(prepared.out_size, 1), np.uint8)
    status = device.zeros(len(prepared.infos), np.int32)
    kernel_data, starts, ends, tables, expansions = batching.packed_views(layout, prepared.launches, buffer)
    samples = [int(np.prod(shape)) for shape in prepared.shapes]
    launches = []  # (label, samples, launch)
    if layout.expansion_count:
        launches.append((EXPANSION, sum(samples), lambda: device.expand(kernel_data, expansions, status)))
    if layout.ans_count:
        ans_tables = batching.packed_ans_records(layout, buffer)
        launches.append((ANS_TABLES, sum(samples), lambda: device.build_ans_tables(kernel_data, ans_tables)))
    first = 0
    for launch, (item_table, task_table) in zip(prepared.launches, tables):
        launch_status = status[first:first + len(launch.items)]  # this launch's items, as launch_packed
        decode = functools.partial(device.decode, launch, kernel_data, starts, ends, out, launch_status,
                                   item_table, task_table)
        launches.append((launch_label(launch), sum(samples[i] for i in launch.item_index), decode))
        first += len(launch.items)
    times, whole = [[] for _ in launches], []
    for attempt in range(repeat + 1):
        status.fill(0)
        events = [device.event() for _ in range(len(launches) + 1)]
        events[0].record()
        for (_, _, run), event in zip(launches, events[1:]):
            run()
            event.record()
        events[-1].synchronize()
        if attempt:
            for index in range(len(launches)):
                times[index].append(device.elapsed_ms(events[index], events[index + 1]))
            whole.append(device.elapsed_ms(events[0], events[-1]))
    entries = np.zeros(len(prepared.infos), np.int32)
    entries[batching.status_order(prepared)] = device.download(status)
    output = device.download(out)
    return {
        "launches": [{"name": label, "samples": count, "ms_min": min(t), "ms_median": statistics.median(t)}
                     for (label, count, _), t in zip(launches, times)],
        "ms_min": min(whole), "ms_median": statistics.median(whole), "samples": sum(samples),
        "out_bytes": int(prepared.out_size), "expansions": int(layout.expansion_count),
        "status_codes": batching.status_codes(entries).tolist(),
        "images": batching.split_output(prepared, output[:max(prepared.out_size, 1)]),
    }


def time_end_to_end(device, items: list, repeat: int) -> float:
    """Best wall-clock seconds of the whole decode_batch from host bytes (validation with checksums,
    packing, the copy, the launches, the status read back) after one untimed call."""
    device.decode_batch(items)
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        device.decode_batch(items)
        best = min(best, time.perf_counter() - started)
    return best


# ---------------------------------------------------------------- device facts and occupancy

def cupy_facts():
    """The current device as CuPy sees it, or why not (a string)."""
    try:
        import cupy

        device = cupy.cuda.Device()
        name = cupy.cuda.runtime.getDeviceProperties(device.id)["name"]
        clock_hz = sm_clock_hz(device.attributes)
        return {"name": name.decode() if isinstance(name, bytes) else str(name),
                "compute_capability": device.compute_capability,
                "sms": device.attributes["MultiProcessorCount"],
                "clock_hz": clock_hz, "runtime": cuda_version(cupy.cuda.runtime.runtimeGetVersion()),
                "driver": cuda_version(cupy.cuda.runtime.driverGetVersion()),
                "nvrtc": ".".join(map(str, cupy.cuda.nvrtc.getVersion())),
                "memory_gib": round(device.mem_info[1] / 2**30, 1)}
    except Exception as error:  # noqa: BLE001 - no CuPy, no driver, no device: say which
        return f"unavailable ({type(error).__name__}: {error})"


def cuda_version(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}"


def sm_clock_hz(attributes: dict) -> float:
    """The SM's maximum clock: the device attribute (kHz), else nvidia-smi's clocks.max.sm (MHz), else 0."""
    if attributes.get("ClockRate"):
        return attributes["ClockRate"] * 1e3
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30, check=True)
        return float(done.stdout.split()[0]) * 1e6
    except Exception:  # noqa: BLE001 - unknown clock: the implied rates are left out
        return 0.0


def device_facts(check) -> dict:
    """SMs and SM clock of the device timed, or bench/gpu.py's H100 figures for the stand-in."""
    if check.stand_in:
        bench = data.bench_gpu()
        return {"name": "no GPU: bench/gpu.py's H100 figures", "sms": bench.H100_SMS,
                "clock_hz": bench.H100_CLOCK_HZ}
    facts = cupy_facts()
    if not isinstance(facts, dict):
        raise RuntimeError(f"CuPy sees no device: {facts}")  # noqa: TRY004 - a missing device, not a type
    return facts


def blocks_per_sm_by_hand(registers: int, threads: int, shared: int, limits: dict) -> dict:
    """Resident blocks per SM from the kernel's registers, threads and shared memory and the SM's
    limits (registers allocated per warp in units of 256; each block's reserved shared memory):
    {"blocks", "limited by"}. Beside the driver's figure, and instead of it for the stand-in."""
    warps = -(-threads // 32)
    registers_per_warp = -(-registers * 32 // 256) * 256
    bounds = {
        "blocks": limits["blocks"],
        "warps": limits["threads"] // (32 * warps),
        "registers": limits["registers"] // max(registers_per_warp * warps, 1),
        "shared memory": limits["shared"] // (shared + limits["reserved_shared"]),
    }
    limit = min(bounds, key=bounds.get)
    return {"blocks": bounds[limit], "limited by": limit}


def cupy_sm_limits() -> dict:
    import cupy

    attributes = cupy.cuda.Device().attributes
    return {"blocks": attributes.get("MaxBlocksPerMultiprocessor", SM90_LIMITS["blocks"]),
            "threads": attributes["MaxThreadsPerMultiProcessor"],
            "registers": attributes["MaxRegistersPerMultiprocessor"],
            "shared": attributes["MaxSharedMemoryPerMultiprocessor"],
            "reserved_shared": attributes.get("ReservedSharedMemoryPerBlock", SM90_LIMITS["reserved_shared"])}


def cupy_function_pointer(kernel) -> int:
    """The CUfunction of a cupy RawKernel (.kernel in CuPy 13; .function in later releases)."""
    for name in ("kernel", "function"):
        inner = getattr(kernel, name, None)
        if inner is not None and hasattr(inner, "ptr"):
            return int(inner.ptr)
    return int(kernel.ptr)


def cupy_occupancy(kernel, threads: int, shared: int) -> dict:
    """Registers and resident blocks per SM of a cupy RawKernel from the driver's occupancy API
    (cuOccupancyMaxActiveBlocksPerMultiprocessor), with the by-hand figure beside it; where this
    CuPy does not reach the API, the by-hand figure alone and why."""
    import cupy

    driver = cupy.cuda.driver
    try:
        pointer = cupy_function_pointer(kernel)
        registers = int(driver.funcGetAttribute(driver.CU_FUNC_ATTRIBUTE_NUM_REGS, pointer))
        blocks = int(driver.occupancyMaxActiveBlocksPerMultiprocessor(pointer, threads, shared))
    except Exception as error:  # noqa: BLE001 - keep the rest of the report
        registers, blocks = int(kernel.num_regs), f"API unavailable ({type(error).__name__}: {error})"
    return {"registers": registers, "threads": threads, "shared": shared, "blocks per SM": blocks,
            "by hand": blocks_per_sm_by_hand(registers, threads, shared, cupy_sm_limits())}


# ---------------------------------------------------------------- smoke: one CuPy batch against the CPU

def smoke_batch(frames: dict, shape: tuple) -> tuple:
    """(items, regions): photos and label maps in both modes (the label maps bring LZ planes), two
    of them cut to a region."""
    height, width = shape
    region = (height // 8, width // 8 + 1, height // 2, width // 2 + 3)
    def item(kind, mode, index):
        encoded = frames["encoded"][kind, mode]
        return encoded[index % len(encoded)]

    items = [item("photos", "compact", 0), item("photos", "fast", 1), item("labels", "compact", 0),
             item("labels", "fast", 1), item("photos", "compact", 2), item("labels", "fast", 0)]
    return items, [None, None, None, None, region, region]


def lz_expansions(prepared) -> int:
    """The LZ streams a prepared batch expands before its decode launches."""
    return 0 if prepared.lz is None else len(prepared.lz.records)


def kernel_occupancy(check, prepared) -> list:
    """[{"kernel", "registers", "threads", "shared", "blocks per SM", "by hand"}] for each launch of
    the batch and the LZ expansion; the stand-in prices the register budget on sm_90's limits."""
    from l3codec.kernels import cuda_c

    kernels = [(cuda_c.KERNELS[launch.mode].source, cuda_c.kernel_name(launch), f" {launch.max_channels} ch",
                int(np.prod(cuda_c.block_shape(launch))), cuda_c.shared_memory_bytes(launch))
               for launch in prepared.launches]
    (_,), (threads,), shared = cuda_c.expand_grid(max(lz_expansions(prepared), 1))
    kernels.append((cuda_c.EXPAND_SOURCE, cuda_c.EXPAND_KERNEL, "", threads, shared))
    reports = []
    for source, name, channels, threads, shared in kernels:
        if check.stand_in:
            budget = cuda_c.REGISTER_BUDGET
            report = {"registers": budget, "threads": threads, "shared": shared, "blocks per SM": "no GPU",
                      "by hand": blocks_per_sm_by_hand(budget, threads, shared, SM90_LIMITS)}
        else:
            report = cupy_occupancy(cuda_c.load_module(source).get_function(name), threads, shared)
        reports.append({"kernel": name + channels, **report})
    return reports


def step_smoke(check) -> dict:
    """One batch through gpu.decode_batch(backend="cupy"), compared pixel for pixel with the CPU
    decoder; the registers and blocks per SM of each kernel it launched (driver occupancy API)."""
    import l3codec

    items, regions = smoke_batch(data.encoded_frames(check), check.frame_shape)
    if check.stand_in:
        from l3codec.kernels import emulation

        images, _ = emulation.decode_batch_emulated(items, regions)
    else:
        from l3codec import gpu

        images = [image.get() for image in gpu.decode_batch(items, backend="cupy", regions=regions)]
    equal = [bool(np.array_equal(image, l3codec.decode(item, region=region)))
             for image, item, region in zip(images, items, regions)]
    prepared = batching.prepare(items, regions)
    occupancy = kernel_occupancy(check, prepared)
    table = ["| kernel | threads | shared bytes | registers | blocks per SM | by hand |",
             "|---|---|---|---|---|---|"]
    for report in occupancy:
        by_hand = f"{report['by hand']['blocks']} ({report['by hand']['limited by']})"
        table.append(f"| {report['kernel']} | {report['threads']} | {report['shared']} "
                     f"| {report['registers']} | {report['blocks per SM']} | {by_hand} |")
    differing = [i for i, same in enumerate(equal) if not same]
    decoder = "the emulated kernels (host stand-in)" if check.stand_in else "CuPy"
    outcome = "all equal to the CPU decoder" if not differing else f"items {differing} DIFFER"
    return {"passed": not differing, "equal_to_cpu": equal, "occupancy": occupancy,
            "note": f"{len(items)} items, {lz_expansions(prepared)} LZ expansions: {outcome}",
            "summary": [f"Decoder: {decoder}; items equal to l3codec.decode: {equal}.", "", *table]}


# ---------------------------------------------------------------- timings: CUDA events per launch

def table_cells(line: str) -> list:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def estimated_per_sample(path: pathlib.Path = ESTIMATE_REPORT) -> tuple:
    """({mode: {"decode", "expansion"}} warp-instructions per sample, where from): the table that
    bench/gpu.py's sass_per_sample_report writes (bench/results/gpu.md: the sm_90 SASS weighted by
    the emulated paths of hires2048 frame 0), found by its column names."""
    decode_column, expansion_column = "warp-instructions per sample", "LZ expansion (its kernel)"
    lines = path.read_text().splitlines() if path.exists() else []
    for number, line in enumerate(lines):
        columns = table_cells(line)
        if decode_column in columns and expansion_column in columns:
            found = {}
            for row in itertools.takewhile(lambda text: text.startswith("|"), lines[number + 2:]):
                cells = table_cells(row)
                if cells[0] in MODES:
                    found[cells[0]] = {"decode": float(cells[columns.index(decode_column)]),
                                       "expansion": float(cells[columns.index(expansion_column)])}
            if found:
                where = path.relative_to(data.REPO) if path.is_relative_to(data.REPO) else path
                return found, f"{where}, bench/gpu.py's SASS estimate of hires2048 frame 0"
    return {}, f"no estimate table in {path}"


def implied_issue_rate(warp_instructions_per_sample: float, samples: int, seconds: float, sms: int,
                       clock_hz: float) -> float:
    """Warp-instructions issued per cycle per SM that the estimated count per sample needs to finish
    `samples` in `seconds`: bench/gpu.py's GB/s = SMs x clock x rate / count, solved for the rate."""
    return warp_instructions_per_sample * samples / (seconds * sms * clock_hz)


def predicted_gbs(estimate: dict, facts: dict) -> dict:
    """bench/gpu.py's issue-bound GB/s at its ISSUE_PER_CYCLE rates on this device (one byte a sample)."""
    rates = getattr(data.bench_gpu(), "ISSUE_PER_CYCLE", ())
    per_second = facts["sms"] * facts["clock_hz"]
    return {mode: [round(per_second * rate / (counts["decode"] + counts["expansion"]) / 1e9)
                   for rate in rates] for mode, counts in estimate.items()}


def timing_row(kind: str, mode: str, batch: int, timed: dict, equal: bool, estimate: dict,
               facts: dict) -> dict:
    """One batch's figures: ms per launch, decoded GB/s, and the issue rate the estimate would need."""
    expansion = sum(launch["ms_min"] for launch in timed["launches"] if launch["name"] in STAGES)
    decode = sum(launch["ms_min"] for launch in timed["launches"] if launch["name"] not in STAGES)
    row = {"frames": kind, "mode": mode, "batch": batch, "expansion_ms": expansion, "decode_ms": decode,
           "all_ms": timed["ms_min"], "all_ms_median": timed["ms_median"], "launches": timed["launches"],
           "samples": timed["samples"], "out_bytes": timed["out_bytes"], "expansions": timed["expansions"],
           "GB/s": timed["out_bytes"] / (timed["ms_min"] / 1e3) / 1e9,
           "decode GB/s": timed["out_bytes"] / (decode / 1e3) / 1e9 if decode else None,
           "status_ok": not any(timed["status_codes"]), "equal_to_cpu": equal}
    if kind == "photos" and mode in estimate and facts["sms"] and facts["clock_hz"]:
        count, decode_count = estimate[mode]["decode"] + estimate[mode]["expansion"], estimate[mode]["decode"]
        device = facts["sms"], facts["clock_hz"]
        samples = timed["samples"]
        row["implied issue rate"] = implied_issue_rate(count, samples, timed["ms_min"] / 1e3, *device)
        row["implied decode issue rate"] = implied_issue_rate(decode_count, samples, decode / 1e3, *device)
    return row


def timing_table(rows: list) -> list:
    def figure(value):  # three significant figures: the stand-in's rates are tiny
        return "" if value is None else f"{value:.3g}"

    header = ("| frames | mode | batch | LZ expansion ms | decode ms | all ms (median) | GB/s "
              "| decode GB/s | implied warp-inst / cycle / SM (decode alone) | end to end ms (GB/s) | LZ "
              "| status | = CPU |")
    table = [header, "|" + "---|" * 13]
    for row in rows:
        implied = "" if row.get("implied issue rate") is None else \
            f"{figure(row['implied issue rate'])} ({figure(row['implied decode issue rate'])})"
        end_to_end = "" if "end_to_end_ms" not in row else \
            f"{row['end_to_end_ms']:.3f} ({figure(row['end to end GB/s'])})"
        table.append(
            f"| {row['frames']} | {row['mode']} | {row['batch']} | {row['expansion_ms']:.3f} "
            f"| {row['decode_ms']:.3f} | {row['all_ms']:.3f} ({row['all_ms_median']:.3f}) "
            f"| {figure(row['GB/s'])} | {figure(row['decode GB/s'])} "
            f"| {implied} | {end_to_end} | {row['expansions']} "
            f"| {'ok' if row['status_ok'] else 'BAD'} | {'yes' if row['equal_to_cpu'] else 'NO'} |")
    return table


def step_timings(check) -> dict:
    """CUDA events around each launch (the LZ expansion, then one decode launch per mode and channel
    count) of batches of 1, 4, 16, 64 frames already on the device; min and median of REPEAT after
    one warm-up; every batch's output checked against the CPU decoder; decoded GB/s; the
    warp-instructions per cycle per SM that bench/gpu.py's estimate would need to match the time."""
    import l3codec

    frames = data.encoded_frames(check)
    device = EmulatedDevice() if check.stand_in else CupyDevice()
    facts, (estimate, estimate_source) = device_facts(check), estimated_per_sample()
    batches = STAND_IN_BATCHES if check.stand_in else QUICK_BATCHES if check.quick else BATCHES
    repeat = STAND_IN_REPEAT if check.stand_in else REPEAT
    plan = [("photos", mode, batch) for mode in MODES for batch in batches]
    plan += [("labels", mode, batches[-1] if check.stand_in else LABEL_BATCH) for mode in MODES]
    rows, references, cut = [], {}, []
    result = {"device": facts["name"], "estimate": estimate, "estimate_source": estimate_source, "rows": rows}
    for kind, mode, batch in plan:
        if check.seconds_left() < 20:
            cut.append(f"{kind} {mode} x{batch}")
            continue
        distinct = frames["encoded"][kind, mode]
        items = [distinct[i % len(distinct)] for i in range(batch)]
        timed = time_launches(device, items, repeat)
        for i in range(min(batch, len(distinct))):
            if (kind, mode, i) not in references:
                references[kind, mode, i] = l3codec.decode(distinct[i])
        equal = all(np.array_equal(image, references[kind, mode, i % len(distinct)])
                    for i, image in enumerate(timed.pop("images")))
        row = timing_row(kind, mode, batch, timed, equal, estimate, facts)
        if kind == "photos":
            seconds = time_end_to_end(device, items, 1 if check.stand_in else END_TO_END_REPEAT)
            row.update(end_to_end_ms=seconds * 1e3, **{"end to end GB/s": row["out_bytes"] / seconds / 1e9})
        rows.append(row)
        check.save({**result, "partial": True})
    passed = all(row["status_ok"] and row["equal_to_cpu"] for row in rows)
    best = {mode: max((r["GB/s"] for r in rows if r["frames"] == "photos" and r["mode"] == mode), default=0)
            for mode in MODES}
    note = ", ".join(f"{mode} up to {gbs:.3g} GB/s" for mode, gbs in best.items())
    note = ("emulator times, not a GPU's: " if check.stand_in else "") + note
    note += ("" if passed else "; OUTPUT OR STATUS WRONG") + (f"; {len(cut)} batches cut" if cut else "")
    rates = getattr(data.bench_gpu(), "ISSUE_PER_CYCLE", "?")
    explanation = (
        f"Device: {facts['name']}, {facts['sms']} SMs at {facts['clock_hz'] / 1e9:.3f} GHz"
        + ("; the emulator (host stand-in): these times are not a GPU's" if check.stand_in else "")
        + f". Min (median) of {repeat} runs after a warm-up, the batch already on the device. GB/s: decoded "
        "bytes / the time of every launch. Implied: the warp-instructions issued per cycle per SM that the "
        f"estimated count per sample ({estimate_source}: {estimate}) needs to finish in the measured time "
        f"(in brackets: the decode launches' count and time alone). bench/gpu.py assumes {rates}, which "
        f"predicts {predicted_gbs(estimate, facts)} GB/s here; the count is frame 0's, other frames differ. "
        f"End to end: the best of {END_TO_END_REPEAT} whole decode_batch calls from host bytes (checksums, "
        "packing, the copy, the launches, the status read back), on the host's clock.")
    return {**result, "passed": passed, "cut_by_deadline": cut, "note": note,
            "summary": [explanation, "", *timing_table(rows)]
            + (["", f"Not timed (deadline): {', '.join(cut)}"] if cut else [])}


# ---------------------------------------------------------------- ncu

NCU_METRICS = ("smsp__inst_executed.sum", "sm__inst_executed.avg.per_cycle_active",
               "sm__warps_active.avg.pct_of_peak_sustained_active", "gpu__time_duration.sum")


def ncu_workload(check) -> dict:
    """What step_ncu profiles: the kernels loaded first (not profiled), then one batch of 4 photos per
    mode launched once; the launches, with their samples, in order (work/ncu_launches.json)."""
    import cupy

    from l3codec import gpu
    from l3codec.kernels import cuda_c

    for source in cuda_c.SOURCES:
        cuda_c.load_module(source)
    frames, launches = data.encoded_frames(check), []
    for mode in MODES:
        distinct = frames["encoded"]["photos", mode]
        prepared = batching.prepare([distinct[i % len(distinct)] for i in range(4)], verify=False)
        layout = batching.packed_layout(prepared)
        host = np.zeros(max(layout.device_size, 1), np.uint8)
        batching.write_packed(prepared, layout, host)
        samples = [int(np.prod(shape)) for shape in prepared.shapes]
        if layout.expansion_count:
            launches.append({"kernel": cuda_c.EXPAND_KERNEL, "mode": mode, "samples": sum(samples)})
        launches += [{"kernel": cuda_c.kernel_name(launch), "mode": mode,
                      "samples": sum(samples[i] for i in launch.item_index)} for launch in prepared.launches]
        out = cupy.empty(max(prepared.out_size, 1), np.uint8)
        status = cupy.zeros(len(prepared.infos), np.int32)
        gpu.launch_packed(prepared, layout, cupy.asarray(host), out, status)
        cupy.cuda.Device().synchronize()
    (pathlib.Path(check.work) / "ncu_launches.json").write_text(json.dumps(launches))
    return {"launches": launches}


def ncu_rows(csv_text: str) -> list:
    """[{"kernel", metric name: value}] per profiled launch, in ID order, from `ncu --csv` output."""
    by_id = {}
    for record in csv.DictReader(line for line in csv_text.splitlines() if line.startswith('"')):
        entry = by_id.setdefault(int(record["ID"]), {"kernel": record["Kernel Name"].split("(")[0].strip()})
        try:
            entry[record["Metric Name"]] = float(record["Metric Value"].replace(",", ""))
        except ValueError:
            entry[record["Metric Name"]] = record["Metric Value"]
    return [by_id[key] for key in sorted(by_id)]


def step_ncu(check) -> dict:
    """ncu's counters of one batch of photos per mode: warp-instructions per sample and IPC measured,
    against bench/gpu.py's estimate."""
    report, work = pathlib.Path(check.out) / "ncu.txt", pathlib.Path(check.work)
    context = work / "ncu_workload.context.json"
    context.write_text(json.dumps({**check.__dict__, "step": "ncu_workload"}))
    command = ["ncu", "--csv", "--print-units", "base", "--clock-control", "none", "-k", "regex:l3_",
               "--metrics", ",".join(NCU_METRICS), "--log-file", str(report),
               sys.executable, str(data.REPO / "bench" / "gpu_check.py"),
               "--child", "gpu_check_kernels:ncu_workload", "--child-path", str(data.REPO / "bench"),
               "--context", str(context)]
    done = subprocess.run(command, cwd=data.REPO, capture_output=True, text=True, check=False,
                          timeout=max(check.seconds_left(), 1))
    launches_path = work / "ncu_launches.json"
    launches = json.loads(launches_path.read_text()) if launches_path.exists() else []
    rows = ncu_rows(report.read_text(errors="replace")) if report.exists() else []
    estimate, source = estimated_per_sample()
    table = ["| kernel | mode | samples | warp-inst / sample (estimate) | IPC per SM | warps active % | ms |",
             "|---|---|---|---|---|---|---|"]
    measured = []
    for launch, row in zip(launches, rows):
        per_sample = row.get("smsp__inst_executed.sum", 0) / launch["samples"]
        part = "expansion" if launch["kernel"] == "l3_expand_lz" else "decode"
        expected = estimate.get(launch["mode"], {}).get(part)
        measured.append({**launch, **row, "warp-inst / sample": per_sample, "estimate": expected})
        table.append(f"| {row['kernel']} | {launch['mode']} | {launch['samples']} "
                     f"| {per_sample:.2f} ({expected}) "
                     f"| {row.get('sm__inst_executed.avg.per_cycle_active', '?')} "
                     f"| {row.get('sm__warps_active.avg.pct_of_peak_sustained_active', '?')} "
                     f"| {row.get('gpu__time_duration.sum', 0) / 1e6:.3f} |")
    ok = done.returncode == 0 and bool(rows) and len(rows) == len(launches)
    note = f"{len(rows)} launches profiled" if ok else \
        f"ncu exit status {done.returncode}, {len(rows)} of {len(launches)} launches read"
    logged = done.stderr + (report.read_text(errors="replace") if report.exists() else "")
    said = [line for line in logged.splitlines() if line.startswith("==")]  # ==PROF==, ==ERROR==, ==WARNING==
    return {"passed": ok, "rc": done.returncode, "measured": measured, "note": note,
            "summary": [f"Estimate: {source}. Raw counters in ncu.txt.", "", *table, "",
                        *[f"    {line}" for line in said[-8:]]]}
