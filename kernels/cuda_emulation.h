// Host emulation of the CUDA C subset the l3codec kernels use, for tests on machines without a GPU.
//
// Include it first (g++ -include kernels/cuda_emulation.h) and compile the UNCHANGED .cu
// files as C++17. Under nvcc or NVRTC it defines nothing.
//
// Every CUDA thread of a block runs as a coroutine (ucontext to start, _setjmp/_longjmp to
// switch) under a cooperative scheduler; blocks run one after another, in grid order, reversed or
// shuffled as the threads are (below). A thread runs until
// it reaches a rendezvous (__syncthreads*, __syncwarp, __shfl*_sync, __ballot_sync) or
// exits. A warp operation completes when the last lane its mask names arrives at the same
// one (same call site, same mask); a __syncthreads when the last thread of the block
// arrives, if all wait at the same call site. The scheduler then runs the first ready
// thread in forward or reversed order (so one warp runs ahead of the others until it must
// wait for them: races between warps show), or a random ready thread (shuffled, seeded).
// When no thread can run before all have exited, the divergence is reported as an error
// instead of a hang: a thread exited or waits elsewhere, masks differ, a lane reads a lane
// outside the mask. The dynamic shared memory is filled before every block with a byte that
// depends on the seed (0xA5 for seed 0), so a read before a write shows, and differs between
// seeds. Atomics are plain read-modify-writes: threads switch only at rendezvous points.
//
// The test shim defines the storage of the kernels' `extern __shared__` array with
// CUDA_EMU_DYNAMIC_SHARED(name) and starts kernels with cuda_emu::launch.
//
// Global memory traffic: a build whose kernel units are compiled with g++ -fsanitize=thread
// (--param=tsan-instrument-func-entry-exit=0) and whose (uninstrumented) shim says
// CUDA_EMU_TRAFFIC_CALLBACKS() counts every load and store the kernels execute into the
// memory regions registered with traffic_region (the arrays handed to the kernel). The
// accesses are grouped into warp instructions as a GPU issues them: the k-th execution of
// one machine instruction by the lanes of a warp between two rendezvous points of theirs is
// one warp instruction. Per region and direction it counts lane accesses, bytes requested,
// warp instructions and the distinct 32-byte sectors each instruction touches (offsets from
// the region's start, which a GPU allocation aligns to 256), and for stores the sectors an
// instruction writes whole. Register allocation is g++'s, so loads the GPU compiler keeps in
// registers (kernel parameters, table fields) may be counted again: report them apart.
#pragma once

#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)

#undef _FORTIFY_SOURCE  // its __longjmp_chk refuses jumps between coroutine stacks
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
constexpr int warpSize = 32;

// The emulator's own functions that kernel code calls: not counted as the kernels' traffic
// or basic blocks (and faster in the counting builds).
#define CUDA_EMU_UNCOUNTED __attribute__((no_sanitize_thread, no_sanitize_coverage))

namespace cuda_emu {

enum Order { FORWARD = 0, REVERSED = 1, SHUFFLED = 2 };
enum State { READY, RUNNING, AT_BARRIER, AT_WARP_OP, EXITED };
enum Op { SYNCTHREADS, SYNCTHREADS_OR, SYNCTHREADS_AND, SYNCTHREADS_COUNT,
          SYNCWARP, SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, BALLOT };
inline const char* const op_names[] = {"__syncthreads", "__syncthreads_or", "__syncthreads_and",
                                       "__syncthreads_count", "__syncwarp", "__shfl_sync", "__shfl_up_sync",
                                       "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync"};
constexpr size_t STACK_BYTES = 256 * 1024;
constexpr int SITES = 256;  // distinct counted instructions a thread may run between two rendezvous
constexpr size_t GUARD_BYTES = 4096;

struct Thread {
    uint3 idx;
    int linear;
    jmp_buf context;
    ucontext_t start;
    bool started;
    State state;
    // the rendezvous it waits at
    Op op;
    const char* file;
    int line;
    unsigned mask;
    unsigned long long value;
    int arg;  // source lane, delta, lane mask, or predicate
    int width;
    unsigned long long result;
    // traffic: rendezvous passed, and how often each instruction ran since the last one
    unsigned epoch;
    int site_count;
    uintptr_t site_pc[SITES];
    unsigned site_runs[SITES];
};

struct Emulator {
    dim3 grid, block;
    uint3 block_idx;
    std::vector<Thread> threads;
    std::vector<char*> stacks;
    Thread* current = nullptr;
    jmp_buf scheduler;
    void (*body)(void*) = nullptr;
    void* body_arg = nullptr;
    unsigned char* shared = nullptr;  // registered by CUDA_EMU_DYNAMIC_SHARED
    size_t shared_capacity = 0;
    // scheduling: a bit per READY thread, indexed by its rank in the chosen order
    Order order = FORWARD;
    std::mt19937 rng;
    std::vector<int> rank, by_rank;
    std::vector<unsigned long long> ready;
    int at_barrier = 0;
    bool failed = false;
    std::string error;
};
inline Emulator g_emu;
inline void coverage_epoch_end(const Thread& t);

CUDA_EMU_UNCOUNTED inline std::string where(const Thread& t) {
    char text[160];
    snprintf(text, sizeof text, "thread (%u,%u,%u) of block %u", t.idx.x, t.idx.y, t.idx.z, g_emu.block_idx.x);
    return text;
}

CUDA_EMU_UNCOUNTED inline std::string waiting(const Thread& t) {
    if (t.state == EXITED) return "has exited";
    char text[256];
    snprintf(text, sizeof text, "waits at %s (%s:%d, mask %08x)", op_names[t.op], t.file, t.line, t.mask);
    return text;
}

CUDA_EMU_UNCOUNTED inline void fail(const std::string& message) {
    if (!g_emu.failed) g_emu.error = message;
    g_emu.failed = true;
}

CUDA_EMU_UNCOUNTED inline void make_ready(Thread& t) {
    t.state = READY;
    const int r = g_emu.rank[t.linear];
    g_emu.ready[r / 64] |= 1ull << (r % 64);
}

// The next thread to run: the first READY one in the order (forward, reversed), so a warp runs
// ahead of the others until it waits for them; or a random READY one (shuffled). -1: none.
inline int pick() {
    Emulator& e = g_emu;
    if (e.order == SHUFFLED) {
        int total = 0;
        for (unsigned long long word : e.ready) total += __builtin_popcountll(word);
        if (total == 0) return -1;
        int k = (int)(e.rng() % (unsigned)total);
        for (size_t w = 0; w < e.ready.size(); ++w) {
            unsigned long long word = e.ready[w];
            const int n = __builtin_popcountll(word);
            if (k >= n) {
                k -= n;
                continue;
            }
            while (k--) word &= word - 1;
            return e.by_rank[w * 64 + __builtin_ctzll(word)];
        }
    }
    for (size_t w = 0; w < e.ready.size(); ++w)
        if (e.ready[w]) return e.by_rank[w * 64 + __builtin_ctzll(e.ready[w])];
    return -1;
}

inline void thread_entry() {
    g_emu.body(g_emu.body_arg);
    Thread& t = *g_emu.current;
    g_emu.current = nullptr;  // from here on the emulator runs, not the kernel: nothing is counted
    coverage_epoch_end(t);
    t.state = EXITED;
    _longjmp(g_emu.scheduler, 1);
}

inline void resume(Thread& t) {
    const int r = g_emu.rank[t.linear];
    g_emu.ready[r / 64] &= ~(1ull << (r % 64));
    t.state = RUNNING;
    g_emu.current = &t;
    if (!_setjmp(g_emu.scheduler)) {
        if (!t.started) {
            t.started = true;
            setcontext(&t.start);
        }
        _longjmp(t.context, 1);
    }
    g_emu.current = nullptr;
}

CUDA_EMU_UNCOUNTED inline bool same_rendezvous(const Thread& a, const Thread& b) {
    return a.op == b.op && a.line == b.line && a.mask == b.mask && strcmp(a.file, b.file) == 0;
}

// The warp operation t waits at completes once every lane its mask names waits at the same one.
CUDA_EMU_UNCOUNTED inline void complete_warp_op(Thread& t) {
    const int warp = t.linear / 32;
    for (int l = 0; l < 32; ++l) {
        if (!((t.mask >> l) & 1)) continue;
        const Thread& other = g_emu.threads[warp * 32 + l];
        if (other.state != AT_WARP_OP || !same_rendezvous(t, other)) return;
    }
    unsigned ballot = 0;
    for (int l = 0; l < 32; ++l)
        if ((t.mask >> l) & 1 && g_emu.threads[warp * 32 + l].arg) ballot |= 1u << l;
    for (int l = 0; l < 32; ++l) {
        if (!((t.mask >> l) & 1)) continue;
        Thread& member = g_emu.threads[warp * 32 + l];
        const int segment = l & ~(member.width - 1), offset = l - segment;
        int source = l;
        switch (member.op) {
            case SHFL_IDX: source = segment + (member.arg & (member.width - 1)); break;
            case SHFL_UP: source = offset >= member.arg ? l - member.arg : l; break;
            case SHFL_DOWN: source = offset + member.arg < member.width ? l + member.arg : l; break;
            case SHFL_XOR: {
                const int x = l ^ member.arg;
                source = x >= segment && x < segment + member.width ? x : l;
                break;
            }
            default: break;
        }
        if (!((t.mask >> source) & 1)) {
            fail(where(member) + " " + waiting(member) + ": reads lane " + std::to_string(source) +
                 ", which is not in the mask");
            return;
        }
        member.result = member.op == BALLOT ? ballot : g_emu.threads[warp * 32 + source].value;
    }
    for (int l = 0; l < 32; ++l)
        if ((t.mask >> l) & 1) make_ready(g_emu.threads[warp * 32 + l]);
}

// Every thread waits at a barrier: release them if it is the same one.
CUDA_EMU_UNCOUNTED inline void release_barrier() {
    const Thread& first = g_emu.threads[0];
    for (const Thread& t : g_emu.threads) {
        if (!same_rendezvous(t, first)) {
            fail("divergent barrier: " + where(first) + " " + waiting(first) + " while " + where(t) + " " +
                 waiting(t));
            return;
        }
    }
    unsigned long long count = 0;
    for (const Thread& t : g_emu.threads) count += t.arg != 0;
    const unsigned long long n = g_emu.threads.size();
    for (Thread& t : g_emu.threads) {
        switch (t.op) {
            case SYNCTHREADS_OR: t.result = count != 0; break;
            case SYNCTHREADS_AND: t.result = count == n; break;
            default: t.result = count; break;
        }
        make_ready(t);
    }
    g_emu.at_barrier = 0;
}

// A thread arrives at a rendezvous; returns the rendezvous' result for it.
CUDA_EMU_UNCOUNTED inline unsigned long long arrive(Op op, const char* file, int line, unsigned mask, unsigned long long value,
                                 int arg, int width) {
    Emulator& e = g_emu;
    Thread& t = *e.current;
    e.current = nullptr;  // the emulator's code is not counted as the kernel's; resume sets it again
    t.op = op;
    t.file = file;
    t.line = line;
    t.mask = mask;
    t.value = value;
    t.arg = arg;
    t.width = width;
    coverage_epoch_end(t);
    ++t.epoch;  // a new group of warp instructions starts after a rendezvous
    t.site_count = 0;
    if (op <= SYNCTHREADS_COUNT) {
        t.state = AT_BARRIER;
        if (++e.at_barrier == (int)e.threads.size()) release_barrier();
    } else {
        t.state = AT_WARP_OP;
        const int lane = t.linear % 32, warp_start = t.linear - lane;
        const unsigned present = warp_start + 32 <= (int)e.threads.size()
                                     ? 0xffffffffu : (1u << (e.threads.size() - warp_start)) - 1;
        if (!((mask >> lane) & 1))
            fail(where(t) + " " + waiting(t) + ": the mask does not name the calling lane");
        else if (mask & ~present)
            fail(where(t) + " " + waiting(t) + ": the mask names lanes the block does not have");
        else if (width < 1 || width > 32 || (width & (width - 1)))
            fail(where(t) + " " + waiting(t) + ": width must be a power of 2 up to 32");
        else
            complete_warp_op(t);
    }
    if (!_setjmp(t.context)) _longjmp(e.scheduler, 1);
    return t.result;
}

// No thread can run and some have not exited: say why.
CUDA_EMU_UNCOUNTED inline void diagnose() {
    for (const Thread& t : g_emu.threads) {
        if (t.state != AT_WARP_OP) continue;
        for (int l = 0; l < 32; ++l) {
            const Thread& other = g_emu.threads[t.linear - t.linear % 32 + l];
            if ((t.mask >> l) & 1 && (other.state != AT_WARP_OP || !same_rendezvous(t, other))) {
                fail("divergent warp operation: " + where(t) + " " + waiting(t) + " while " + where(other) + " " +
                     waiting(other));
                return;
            }
        }
    }
    for (const Thread& t : g_emu.threads) {
        if (t.state != AT_BARRIER) continue;
        for (const Thread& other : g_emu.threads) {
            if (other.state != AT_BARRIER) {
                fail("divergent barrier: " + where(t) + " " + waiting(t) + " while " + where(other) + " " +
                     waiting(other));
                return;
            }
        }
    }
    fail("deadlock: no thread can run");
}


// ---------------------------------------------------------------- global memory traffic

enum { TRAFFIC_REGIONS = 8, SECTOR_BYTES = 32 };

struct TrafficCount {
    unsigned long long lane_accesses, bytes, instructions, sectors, full_sectors;
};

// One lane's access to one sector: grouped into warp instructions at the end of each block.
struct SectorAccess {
    unsigned warp, epoch;
    uintptr_t pc;
    unsigned run;  // the k-th execution of pc by this lane since its last rendezvous
    unsigned char region, write;
    unsigned long long sector;
    unsigned bytes;  // bit i: byte i of the sector
};

struct Traffic {
    bool enabled = false;
    uintptr_t base[TRAFFIC_REGIONS] = {}, size[TRAFFIC_REGIONS] = {};
    TrafficCount count[TRAFFIC_REGIONS][2] = {};  // [region][write]
    std::vector<SectorAccess> pending;  // the current block's
};
inline Traffic g_traffic;

inline void traffic_region(int region, const void* base, size_t size) {
    if (region < 0 || region >= TRAFFIC_REGIONS) return;
    g_traffic.base[region] = reinterpret_cast<uintptr_t>(base);
    g_traffic.size[region] = size;
}

// Count from now on, from zero (the regions stay registered).
inline void traffic_start() {
    Traffic& tr = g_traffic;
    for (auto& region : tr.count) region[0] = region[1] = TrafficCount{};
    tr.pending.clear();
    tr.enabled = true;
}

inline void traffic_stop() { g_traffic.enabled = false; }

// How often thread t ran instruction pc since its last rendezvous (then one more), or -1.
CUDA_EMU_UNCOUNTED inline int next_run(Thread& t, uintptr_t pc) {
    int site = 0;
    while (site < t.site_count && t.site_pc[site] != pc) ++site;
    if (site == t.site_count) {
        if (site == SITES) {
            fail(where(t) + ": more than " + std::to_string(SITES) + " counted instructions between two rendezvous");
            return -1;
        }
        t.site_pc[site] = pc;
        t.site_runs[site] = 0;
        ++t.site_count;
    }
    return (int)t.site_runs[site]++;
}

// A kernel thread accessed size bytes at address from instruction pc.
CUDA_EMU_UNCOUNTED inline void traffic_access(uintptr_t address, unsigned size, bool write, uintptr_t pc) {
    Traffic& tr = g_traffic;
    Thread* t = g_emu.current;
    if (!tr.enabled || t == nullptr) return;
    int region = 0;
    while (region < TRAFFIC_REGIONS && address - tr.base[region] >= tr.size[region]) ++region;
    if (region == TRAFFIC_REGIONS) return;  // stack, shared memory or the emulator's own
    const int run = next_run(*t, pc);
    if (run < 0) return;
    TrafficCount& c = tr.count[region][write];
    c.lane_accesses += 1;
    c.bytes += size;
    const uintptr_t offset = address - tr.base[region];
    for (uintptr_t sector = offset / SECTOR_BYTES; sector <= (offset + size - 1) / SECTOR_BYTES; ++sector) {
        const uintptr_t start = sector * SECTOR_BYTES;
        const uintptr_t lo = std::max<uintptr_t>(offset, start) - start;
        const uintptr_t hi = std::min<uintptr_t>(offset + size, start + SECTOR_BYTES) - start;
        const unsigned bytes = (unsigned)(((1ull << hi) - 1) & ~((1ull << lo) - 1));
        tr.pending.push_back({(unsigned)t->linear / 32, t->epoch, pc, (unsigned)run, (unsigned char)region,
                              (unsigned char)write, sector, bytes});
    }
}

// Group the block's accesses into warp instructions and their distinct sectors.
inline void traffic_flush() {
    std::vector<SectorAccess>& p = g_traffic.pending;
    auto instruction = [](const SectorAccess& a) {
        return std::make_tuple(a.warp, a.epoch, a.pc, a.run, a.region, a.write);
    };
    std::sort(p.begin(), p.end(), [&](const SectorAccess& a, const SectorAccess& b) {
        return std::make_pair(instruction(a), a.sector) < std::make_pair(instruction(b), b.sector);
    });
    for (size_t i = 0; i < p.size();) {
        const auto current = instruction(p[i]);
        TrafficCount& c = g_traffic.count[p[i].region][p[i].write];
        c.instructions += 1;
        while (i < p.size() && instruction(p[i]) == current) {
            const unsigned long long sector = p[i].sector;
            unsigned bytes = 0;
            for (; i < p.size() && instruction(p[i]) == current && p[i].sector == sector; ++i)
                bytes |= p[i].bytes;
            c.sectors += 1;
            c.full_sectors += bytes == 0xffffffffu;
        }
    }
    p.clear();
}


// ---------------------------------------------------------------- warp-level code coverage

// A build whose kernel units are compiled with g++ -fsanitize-coverage=trace-pc, and whose
// shim says CUDA_EMU_COVERAGE_CALLBACK(), counts how often each basic block of the kernels
// runs as a warp: the k-th run of a block by the lanes of a warp between two of their
// rendezvous points is one warp execution, as a GPU issues a divergent warp's paths one
// after another. Keyed by the return address of the block's callback. (Traffic and
// coverage share the per-thread run counts: count one of them per launch.)
struct CoverageKey {
    unsigned warp, epoch;
    uintptr_t pc;
    bool operator==(const CoverageKey& o) const { return warp == o.warp && epoch == o.epoch && pc == o.pc; }
};
struct CoverageKeyHash {
    size_t operator()(const CoverageKey& k) const {
        return std::hash<uintptr_t>()(k.pc ^ ((uintptr_t)k.epoch << 24) ^ ((uintptr_t)k.warp << 54));
    }
};
struct Coverage {
    bool enabled = false;
    std::unordered_map<uintptr_t, unsigned long long> warp_runs;  // pc -> warp executions
    // the current block's: most runs of pc by one lane of a warp between two rendezvous
    std::unordered_map<CoverageKey, unsigned, CoverageKeyHash> most_runs;
};
inline Coverage g_coverage;

inline void coverage_start() {
    g_coverage.warp_runs.clear();
    g_coverage.most_runs.clear();
    g_coverage.enabled = true;
}

inline void coverage_stop() { g_coverage.enabled = false; }

CUDA_EMU_UNCOUNTED inline void coverage_visit(uintptr_t pc) {
    if (g_coverage.enabled && g_emu.current != nullptr) next_run(*g_emu.current, pc);
}

// Thread t reaches a rendezvous or exits: a warp runs a block as often as its busiest lane.
CUDA_EMU_UNCOUNTED inline void coverage_epoch_end(const Thread& t) {
    if (!g_coverage.enabled) return;
    for (int site = 0; site < t.site_count; ++site) {
        unsigned& most = g_coverage.most_runs[{(unsigned)t.linear / 32, t.epoch, t.site_pc[site]}];
        most = std::max(most, t.site_runs[site]);
    }
}

inline void coverage_flush() {
    for (const auto& [key, runs] : g_coverage.most_runs) g_coverage.warp_runs[key.pc] += runs;
    g_coverage.most_runs.clear();
}

inline int run_block() {
    for (;;) {
        const int next = pick();
        if (next < 0) break;
        resume(g_emu.threads[next]);
        if (g_emu.failed) return -1;
    }
    for (const Thread& t : g_emu.threads)
        if (t.state != EXITED) {
            diagnose();
            return -1;
        }
    return 0;
}

template <typename Body>
inline void call_body(void* body) {
    (*static_cast<Body*>(body))();
}

// Run body() (a call of the kernel) as every thread of every block of the grid. Returns 0, or
// -1 with the reason in last_error().
template <typename Body>
int launch(dim3 grid, dim3 block, size_t shared_bytes, int order, unsigned seed, Body body) {
    Emulator& e = g_emu;
    e.failed = false;
    e.error.clear();
    const size_t count = (size_t)block.x * block.y * block.z;
    if (count == 0 || count > 1024 || grid.y != 1 || grid.z != 1 || order < FORWARD || order > SHUFFLED) {
        fail("unsupported launch");
        return -1;
    }
    if (shared_bytes > e.shared_capacity) {
        fail("dynamic shared memory request " + std::to_string(shared_bytes) + " exceeds the emulator's " +
             std::to_string(e.shared_capacity) + " bytes");
        return -1;
    }
    while (e.stacks.size() < count) {
        void* memory = mmap(nullptr, STACK_BYTES + GUARD_BYTES, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (memory == MAP_FAILED) {
            fail("cannot allocate a thread stack");
            return -1;
        }
        mprotect(memory, GUARD_BYTES, PROT_NONE);  // a stack overflow faults instead of corrupting
        e.stacks.push_back(static_cast<char*>(memory));
    }
    e.grid = grid;
    e.block = block;
    e.body = &call_body<Body>;
    e.body_arg = &body;
    e.order = static_cast<Order>(order);
    e.rng.seed(seed);
    e.threads.assign(count, Thread{});
    e.rank.resize(count);
    e.by_rank.resize(count);
    for (size_t i = 0; i < count; ++i) e.rank[i] = e.order == REVERSED ? (int)(count - 1 - i) : (int)i;
    for (size_t i = 0; i < count; ++i) e.by_rank[e.rank[i]] = (int)i;
    e.ready.assign((count + 63) / 64, 0);
    // blocks one after another, in the threads' order (a seeded permutation when shuffled): a GPU runs
    // them in any order, so whatever blocks report together (an item's status) must not depend on it
    std::vector<unsigned> blocks(grid.x);
    for (unsigned b = 0; b < grid.x; ++b) blocks[b] = e.order == REVERSED ? grid.x - 1 - b : b;
    if (e.order == SHUFFLED) std::shuffle(blocks.begin(), blocks.end(), e.rng);
    for (const unsigned b : blocks) {
        e.block_idx = {b, 0, 0};
        e.at_barrier = 0;
        if (e.shared) memset(e.shared, (int)((0xA5 + 0x3B * seed) & 0xFF), e.shared_capacity);  // seed 0: 0xA5
        for (size_t i = 0; i < count; ++i) {
            Thread& t = e.threads[i];
            t = Thread{};
            t.linear = (int)i;
            t.idx = {unsigned(i % block.x), unsigned(i / block.x % block.y), unsigned(i / (block.x * block.y))};
            getcontext(&t.start);
            t.start.uc_stack.ss_sp = e.stacks[i] + GUARD_BYTES;
            t.start.uc_stack.ss_size = STACK_BYTES;
            t.start.uc_link = nullptr;
            makecontext(&t.start, thread_entry, 0);
            make_ready(t);
        }
        if (run_block() != 0) return -1;
        traffic_flush();
        coverage_flush();
    }
    return 0;
}

inline const char* last_error() { return g_emu.error.c_str(); }

struct SharedRegistration {
    SharedRegistration(unsigned char* memory, size_t bytes) {
        g_emu.shared = memory;
        g_emu.shared_capacity = bytes;
    }
};

// ---------------------------------------------------------------- intrinsics

template <typename V>
CUDA_EMU_UNCOUNTED inline V shuffle(Op op, const char* file, int line, unsigned mask, V value, int arg, int width = 32) {
    static_assert(sizeof(V) == 4 || sizeof(V) == 8, "shuffles move 4- or 8-byte values");
    unsigned long long bits = 0;
    memcpy(&bits, &value, sizeof(V));
    const unsigned long long result = arrive(op, file, line, mask, bits, arg, width);
    V out;
    memcpy(&out, &result, sizeof(V));
    return out;
}

template <typename V, typename C, typename W>
inline V atomic_cas(V* address, C compare, W value) {
    const V old = *address;
    if (old == (V)compare) *address = (V)value;
    return old;
}

}  // namespace cuda_emu

#define CUDA_EMU_MAX_SHARED (256 * 1024)
#define CUDA_EMU_DYNAMIC_SHARED(name)                        \
    alignas(16) unsigned char name[CUDA_EMU_MAX_SHARED];     \
    static cuda_emu::SharedRegistration cuda_emu_registration_##name(name, sizeof(name))

#define threadIdx (cuda_emu::g_emu.current->idx)
#define blockIdx (cuda_emu::g_emu.block_idx)
#define blockDim (cuda_emu::g_emu.block)
#define gridDim (cuda_emu::g_emu.grid)

#define __syncthreads() ((void)cuda_emu::arrive(cuda_emu::SYNCTHREADS, __FILE__, __LINE__, 0, 0, 0, 32))
#define __syncthreads_or(p) \
    ((int)cuda_emu::arrive(cuda_emu::SYNCTHREADS_OR, __FILE__, __LINE__, 0, 0, (p) != 0, 32))
#define __syncthreads_and(p) \
    ((int)cuda_emu::arrive(cuda_emu::SYNCTHREADS_AND, __FILE__, __LINE__, 0, 0, (p) != 0, 32))
#define __syncthreads_count(p) \
    ((int)cuda_emu::arrive(cuda_emu::SYNCTHREADS_COUNT, __FILE__, __LINE__, 0, 0, (p) != 0, 32))
namespace cuda_emu {
struct SyncWarp {  // __syncwarp() and __syncwarp(mask) with the call site
    const char* file;
    int line;
    CUDA_EMU_UNCOUNTED void operator()(unsigned mask = 0xffffffffu) const { arrive(SYNCWARP, file, line, mask, 0, 0, 32); }
};
}  // namespace cuda_emu
#define __syncwarp(...) (cuda_emu::SyncWarp{__FILE__, __LINE__}(__VA_ARGS__))
#define __shfl_sync(...) cuda_emu::shuffle(cuda_emu::SHFL_IDX, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) cuda_emu::shuffle(cuda_emu::SHFL_UP, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) cuda_emu::shuffle(cuda_emu::SHFL_DOWN, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) cuda_emu::shuffle(cuda_emu::SHFL_XOR, __FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, p) \
    ((unsigned)cuda_emu::arrive(cuda_emu::BALLOT, __FILE__, __LINE__, (mask), 0, (p) != 0, 32))
#define __any_sync(mask, p) (__ballot_sync(mask, p) != 0)
#define __all_sync(mask, p) (__ballot_sync(mask, p) == (unsigned)(mask))

#define atomicCAS(address, compare, value) cuda_emu::atomic_cas(address, compare, value)
template <typename V, typename W>
inline V atomicAdd(V* address, W value) {
    const V old = *address;
    *address = old + (V)value;
    return old;
}
template <typename V, typename W>
inline V atomicMax(V* address, W value) {
    const V old = *address;
    *address = old > (V)value ? old : (V)value;
    return old;
}
template <typename V, typename W>
inline V atomicOr(V* address, W value) {
    const V old = *address;
    *address = old | (V)value;
    return old;
}

inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
// the low 32 bits of hi:lo shifted right by shift mod 32 (CUDA's wrapping funnel shift)
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (shift & 31));
}
template <typename V>
inline V __ldg(const V* p) { return *p; }
inline void __threadfence() {}
inline void __threadfence_block() {}

// The callbacks g++ -fsanitize=thread puts before every load and store of an instrumented
// unit (no TSan runtime is linked): say this once, in a unit compiled WITHOUT the flag.
#define CUDA_EMU_TRAFFIC_ACCESS(kind, size, write)                                                 \
    extern "C" void __tsan_##kind##size(void* address) {                                          \
        cuda_emu::traffic_access(reinterpret_cast<uintptr_t>(address), size, write,                 \
                                 reinterpret_cast<uintptr_t>(__builtin_return_address(0)));         \
    }                                                                                               \
    extern "C" void __tsan_unaligned_##kind##size(void* address) { __tsan_##kind##size(address); }
#define CUDA_EMU_TRAFFIC_CALLBACKS()                                                               \
    extern "C" void __tsan_init() {}                                                               \
    CUDA_EMU_TRAFFIC_ACCESS(read, 1, false)                                                        \
    CUDA_EMU_TRAFFIC_ACCESS(read, 2, false)                                                        \
    CUDA_EMU_TRAFFIC_ACCESS(read, 4, false)                                                        \
    CUDA_EMU_TRAFFIC_ACCESS(read, 8, false)                                                        \
    CUDA_EMU_TRAFFIC_ACCESS(read, 16, false)                                                       \
    CUDA_EMU_TRAFFIC_ACCESS(write, 1, true)                                                        \
    CUDA_EMU_TRAFFIC_ACCESS(write, 2, true)                                                        \
    CUDA_EMU_TRAFFIC_ACCESS(write, 4, true)                                                        \
    CUDA_EMU_TRAFFIC_ACCESS(write, 8, true)                                                        \
    CUDA_EMU_TRAFFIC_ACCESS(write, 16, true)                                                       \
    /* a struct copy: one access of its size */                                                    \
    extern "C" void __tsan_read_range(void* address, unsigned long size) {                         \
        cuda_emu::traffic_access(reinterpret_cast<uintptr_t>(address), (unsigned)size, false,       \
                                 reinterpret_cast<uintptr_t>(__builtin_return_address(0)));         \
    }                                                                                               \
    extern "C" void __tsan_write_range(void* address, unsigned long size) {                        \
        cuda_emu::traffic_access(reinterpret_cast<uintptr_t>(address), (unsigned)size, true,        \
                                 reinterpret_cast<uintptr_t>(__builtin_return_address(0)));         \
    }                                                                                               \
    static_assert(true, "")

// The callback g++ -fsanitize-coverage=trace-pc puts at the start of every basic block.
#define CUDA_EMU_COVERAGE_CALLBACK()                                                               \
    extern "C" void __sanitizer_cov_trace_pc() {                                                   \
        cuda_emu::coverage_visit(reinterpret_cast<uintptr_t>(__builtin_return_address(0)));        \
    }                                                                                               \
    static_assert(true, "")

#endif  // !__CUDACC__ && !__CUDACC_RTC__
