"""Model for compact v2 (issue #39): real rANS coded sizes over compact's own MED residuals.

Residuals: colour transform rg-mean (P0 = R-G+128, P1 = G, P2 = B-((R+G)>>1)+128, mod 256), tiles 512 wide,
bands of 32 rows, neighbours exactly as docs/FORMAT.md §6.3 (a band's first row has no row above; column 0
has W = N = NW = the sample above). NE (slope-2 variant only) is X[r-1][c+1], or N at the tile's right edge
and in a band's first row.

Coder: rANS, 32-bit state, one state per row stream (one row of one tile of one plane), 16-bit (L = 2^16) or
8-bit (L = 2^23) renormalisation, the final state flushed as 4 bytes per row. Tokens are JPEG XL hybrid
integers of the zigzagged residual m: m < 2^k is its own token; otherwise n = floor(log2 m), token =
2^k + (n-k)*2^mb + the mb bits below the top bit, and the n-mb low bits are raw, pushed through the same
rANS state as a uniform symbol (freq 1 of 2^nbits). Static tables, quantised to 2^prec, every used token
>= 1.

Counted bytes: row streams + per stream 2 bytes header + a row-length table (h entries of L bits, L = bit
length of the longest row in bytes) + 4 bytes stream-table entry + 44 bytes file header; tables: per
(table set, plane, context) 1 byte alphabet size, then per token a 4-bit bit length of its frequency and the
frequency's bits below its top bit; bias: 41 bytes per plane. Sample-copy rows and run mode are not
modelled (run mode: see the report).

--study flush (issue #39 phase 1) varies only the row stream's end: the encoder starting from state 0
instead of L (start="zero"), the final state in the fewest bytes that hold it with the count taken from the
row's length (flush="min"), and one word stream per band-tile interleaving its rows (layout="interleaved",
priced: the same words, no row-length table, 2 bits of flush length per row).

Usage: python bench/compact_v2_model.py IMAGES... [--study flush] --out bench/results/compact-v2-model.md
"""
import argparse, os, sys, time, platform
import numpy as np, cv2, numba as nb

TW, BAND = 512, 32
BINS14 = np.array([1, 2, 3, 5, 7, 10, 14, 20, 28, 40, 60, 90, 140, 220], np.int32)
BINS8 = np.array([1, 3, 6, 10, 16, 26, 44, 80], np.int32)
BINS4 = np.array([2, 8, 26, 80], np.int32)


@nb.njit(cache=True)
def q9(g):
    if g <= -21: return -4
    if g <= -7: return -3
    if g <= -3: return -2
    if g < 0: return -1
    if g == 0: return 0
    if g < 3: return 1
    if g < 7: return 2
    if g < 21: return 3
    return 4


@nb.njit(cache=True)
def neighbours_at(pl, y, x, r, c):
    """W, N, NW of pl[y, x] (band row r, tile column c) as FORMAT.md §6.3 defines them, for the
    encoder's residuals and the decoder's rebuild alike."""
    if r == 0:
        if c == 0:
            return 128, 128, 128
        if c == 1:
            return pl[y, x - 1], pl[y, x - 1], pl[y, x - 1]
        return pl[y, x - 1], pl[y, x - 1], pl[y, x - 2]
    if c == 0:
        return pl[y - 1, x], pl[y - 1, x], pl[y - 1, x]
    return pl[y, x - 1], pl[y - 1, x], pl[y - 1, x - 1]


@nb.njit(cache=True)
def med(W, N, NW):
    """The median edge detector's prediction."""
    if NW >= max(W, N):
        return min(W, N)
    if NW <= min(W, N):
        return max(W, N)
    return W + N - NW


@nb.njit(cache=True)
def residuals(pl, e, act, actne, gctx, TW):
    """e: MED residual wrapped to [-128,128); act = |W-NW|+|N-NW|; actne = act + |NE-N|; gctx = q9(N-NW)*9+q9(NW-W)."""
    H, Wd = pl.shape
    for y in range(H):
        r = y % BAND
        for x in range(Wd):
            x0 = (x // TW) * TW
            w = min(TW, Wd - x0)
            c = x - x0
            W, N, NW = neighbours_at(pl, y, x, r, c)
            NE = pl[y - 1, x + 1] if r > 0 and c + 1 < w else N
            p = med(W, N, NW)
            d = ((pl[y, x] - p + 128) & 255) - 128
            e[y, x] = d
            a = abs(W - NW) + abs(N - NW)
            act[y, x] = a
            actne[y, x] = a + abs(NE - N)
            gctx[y, x] = q9(N - NW) * 9 + q9(NW - W)


@nb.njit(cache=True)
def tokenize(m, k, mb):
    if m < (1 << k):
        return m, 0, 0
    n = 0
    v = m
    while v > 1:
        v >>= 1; n += 1
    nbits = n - mb
    tok = (1 << k) + ((n - k) << mb) + ((m >> nbits) & ((1 << mb) - 1))
    return tok, nbits, m & ((1 << nbits) - 1)


@nb.njit(cache=True)
def make_tokens(e, ctx, k, mb, toks, nbit, raw):
    n = e.size
    for i in range(n):
        d = e.flat[i]
        m = 2 * d if d >= 0 else -2 * d - 1
        t, b, rv = tokenize(m, k, mb)
        toks.flat[i] = t; nbit.flat[i] = b; raw.flat[i] = rv


def quantise(cnt, prec):
    tot = cnt.sum()
    M = 1 << prec
    if tot == 0:
        return np.zeros_like(cnt)
    f = np.where(cnt > 0, np.maximum(1, np.round(cnt * M / tot)), 0).astype(np.int64)
    diff = M - f.sum()
    while diff != 0:
        if diff > 0:
            f[np.argmax(cnt)] += diff; diff = 0
        else:
            order = np.argsort(-f)
            for j in order:
                if f[j] > 1 and diff < 0:
                    take = min(f[j] - 1, -diff)
                    f[j] -= take; diff += take
    return f


def table_bits(f):
    """1 byte alphabet size; per token 4-bit bit length of f, then f's bits below its top bit."""
    used = np.flatnonzero(f)
    if used.size == 0:
        return 8
    n = used[-1] + 1
    bl = np.zeros(n, np.int64)
    nz = f[:n] > 0
    bl[nz] = np.floor(np.log2(f[:n][nz])).astype(np.int64) + 1
    return 8 + 4 * n + int(np.maximum(bl - 1, 0).sum())


@nb.njit(cache=True)
def rans_rows(toks, nbit, raw, ctx, tset, freq, cum, prec, renorm, collect, words_out, TW, small_start, min_flush,
              flushed):
    """Encode every row stream (row y, tile tx) of one plane. Returns bytes per row stream in a (H, tiles) array.
    renorm: 16 or 8. freq/cum: [tableset, ctx, token]. If collect, row (0,0..) words are written to words_out
    per stream for verification (only used for small images). small_start: the encoder starts from state 0
    instead of L (the decoder then stops reading words when its stream is spent and checks the end state is 0).
    min_flush: the final state is flushed in the fewest bytes that hold it (0-4) instead of always 4."""
    H, Wd = toks.shape
    ntx = (Wd + TW - 1) // TW
    out = np.zeros((H, ntx), np.int64)
    L = np.int64(1) << (16 if renorm == 16 else 23)
    buf = np.zeros(4 * TW + 8, np.int64)
    for y in range(H):
        for tx in range(ntx):
            x0 = tx * TW
            x1 = min(x0 + TW, Wd)
            x = np.int64(0) if small_start else L
            nw = 0
            for xx in range(x1 - 1, x0 - 1, -1):
                # raw bits first (decoded after the token)
                b = nbit[y, xx]
                if b > 0:
                    xmax = ((L >> b) << renorm)
                    while x >= xmax:
                        buf[nw] = x & ((1 << renorm) - 1); nw += 1; x >>= renorm
                    x = (x << b) + raw[y, xx]
                s = toks[y, xx]; t = tset[y, xx]; cc = ctx[y, xx]
                f = freq[t, cc, s]; c = cum[t, cc, s]
                xmax = ((L >> prec) << renorm) * f
                while x >= xmax:
                    buf[nw] = x & ((1 << renorm) - 1); nw += 1; x >>= renorm
                x = ((x // f) << prec) + (x % f) + c
            flush = 4
            if min_flush:
                flush = 0
                while (x >> (8 * flush)) > 0:
                    flush += 1
            flushed[0] += flush
            out[y, tx] = nw * (renorm // 8) + flush
            if collect:
                # layout: [nw, final state, words...]
                words_out[y, tx, 0] = nw
                words_out[y, tx, 1] = x
                for j in range(nw):
                    words_out[y, tx, 2 + j] = buf[j]
    return out


@nb.njit(cache=True)
def rans_decode_rows(words, nbit_unused, ctx, tset, freq, cum, prec, renorm, Wd, dec_tok, dec_raw, kk, mb, TW,
                     small_start):
    """Decode every row stream; tokens then raw bits (bit count from the token, as a real decoder does)."""
    H = ctx.shape[0]
    ntx = (Wd + TW - 1) // TW
    L = np.int64(1) << (16 if renorm == 16 else 23)
    M = np.int64(1) << prec
    for y in range(H):
        for tx in range(ntx):
            x0 = tx * TW
            x1 = min(x0 + TW, Wd)
            nw = words[y, tx, 0]
            x = words[y, tx, 1]
            pos = nw - 1
            for xx in range(x0, x1):
                t = tset[y, xx]; cc = ctx[y, xx]
                slot = x & (M - 1)
                s = 0
                while cum[t, cc, s] + freq[t, cc, s] <= slot:
                    s += 1
                x = freq[t, cc, s] * (x >> prec) + slot - cum[t, cc, s]
                while x < L and pos >= 0:
                    x = (x << renorm) | words[y, tx, 2 + pos]; pos -= 1
                dec_tok[y, xx] = s
                if s < (1 << kk):
                    b = 0
                else:
                    n = ((s - (1 << kk)) >> mb) + kk
                    b = n - mb
                if b > 0:
                    dec_raw[y, xx] = x & ((1 << b) - 1)
                    x >>= b
                    while x < L and pos >= 0:
                        x = (x << renorm) | words[y, tx, 2 + pos]; pos -= 1
                else:
                    dec_raw[y, xx] = 0
            if pos != -1 or x != (0 if small_start else L):
                return False
    return True


@nb.njit(cache=True)
def reconstruct(d, bias, use_bias, TW):
    """Decoder side: rebuild a plane from decoded residuals d in raster order, neighbours and the bias context from
    already rebuilt samples only (FORMAT.md §6.3 neighbours)."""
    H, Wd = d.shape
    pl = np.zeros((H, Wd), np.int32)
    for y in range(H):
        r = y % BAND
        for x in range(Wd):
            x0 = (x // TW) * TW
            c = x - x0
            W, N, NW = neighbours_at(pl, y, x, r, c)
            p = med(W, N, NW)
            e = d[y, x]
            if use_bias:
                g = q9(N - NW) * 9 + q9(NW - W)
                sg = -1 if g < 0 else 1
                e = (((e * sg + bias[abs(g)]) * sg + 128) & 255) - 128
            pl[y, x] = (p + e) & 255
    return pl


def load(path):
    img = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    if img is None or img.ndim != 3 or img.dtype != np.uint8:
        return None
    return np.ascontiguousarray(img[..., :3][..., ::-1])


def planes_of(rgb):
    R, G, B = (rgb[..., i].astype(np.int32) for i in range(3))
    return [(R - G + 128) & 255, G.copy(), (B - ((R + G) >> 1) + 128) & 255]


class Prep:
    def __init__(self, rgb):
        self.H, self.W = rgb.shape[:2]
        self.pls = planes_of(rgb)
        self.cache = {}

    def planes_for(self, tw):
        if tw not in self.cache:
            out = []
            for pl in self.pls:
                e = np.zeros(pl.shape, np.int32); a = np.zeros_like(e); ane = np.zeros_like(e); g = np.zeros_like(e)
                residuals(np.ascontiguousarray(pl), e, a, ane, g, tw)
                out.append((e, a, ane, g))
            self.cache[tw] = out
        return self.cache[tw]


def code_image(prep, cfg, verify=False):
    """cfg: dict(bins, ne, k, mb, prec, renorm, group_rows (0 = per image), bias). Returns total bytes."""
    TW = cfg["tw"]
    total = 44.0
    for pi, pl in enumerate(prep.planes_for(TW)):
        if cfg["bias"] == "choose":
            f0 = FLUSH.copy()
            t0 = plane_bytes(prep, pl, dict(cfg, bias=False), verify, pi)
            f1 = FLUSH.copy()
            t1 = plane_bytes(prep, pl, dict(cfg, bias=True), verify, pi)
            FLUSH[:] = f1 if t0 <= t1 else f0 + (FLUSH - f1)   # count only the chosen pass
            total += min(t0, t1) + 1 / 8
        else:
            total += plane_bytes(prep, pl, cfg, verify, pi)
    return total


def plane_bytes(prep, pl, cfg, verify, pi):
    H, Wd = prep.H, prep.W
    TW = cfg["tw"]
    ntx = (Wd + TW - 1) // TW
    bins = cfg["bins"]
    total = 0.0
    e, a, ane, g = pl
    if True:
        if cfg["bias"]:
            sign = np.where(g < 0, -1, 1); gc = np.abs(g)
            sr = e * sign
            sums = np.bincount(gc.ravel(), weights=sr.ravel(), minlength=41)
            cn = np.bincount(gc.ravel(), minlength=41)
            bias = np.round(sums / np.maximum(cn, 1)).astype(np.int32)
            e = (((sr - bias[gc]) * sign + 128) & 255) - 128
            total += 41
        act = ane if cfg["ne"] else a
        b = (bins * 3 // 2) if cfg["ne"] else bins
        ctx = np.digitize(act, b).astype(np.int32)
        nctx = len(bins) + 1
        toks = np.zeros(e.shape, np.int32); nbit = np.zeros_like(toks); raw = np.zeros_like(toks)
        make_tokens(e, ctx, cfg["k"], cfg["mb"], toks, nbit, raw)
        ntok = (1 << cfg["k"]) + (8 - cfg["k"]) * (1 << cfg["mb"])
        gr = cfg["group_rows"]
        tset = (np.arange(H)[:, None] // gr if gr else np.zeros((H, 1), np.int64)) * np.ones((1, Wd), np.int64)
        tset = tset.astype(np.int32)
        nsets = int(tset.max()) + 1
        cnt = np.bincount(((tset * nctx + ctx) * ntok + toks).ravel(), minlength=nsets * nctx * ntok).reshape(nsets, nctx, ntok)
        freq = np.zeros_like(cnt); cum = np.zeros_like(cnt)
        TBL[0] = 0.0
        for s in range(nsets):
            for c in range(nctx):
                f = quantise(cnt[s, c], cfg["prec"])
                freq[s, c] = f
                cum[s, c] = np.concatenate([[0], np.cumsum(f)[:-1]])
                total += table_bits(f) / 8.0
                TBL[0] += table_bits(f) / 8.0
        words = np.zeros((H, ntx, 2 + 2 * TW + 8), np.int64) if verify else np.zeros((1, 1, 1), np.int64)
        small, minf = cfg["start"] == "zero", cfg["flush"] != "4"
        FLUSHED[0] = 0
        rows = rans_rows(toks, nbit, raw, ctx, tset, freq, cum, cfg["prec"], cfg["renorm"], verify, words, TW, small, minf,
                         FLUSHED)
        FLUSH[0] += FLUSHED[0]; FLUSH[1] += rows.size
        FLUSH[3] += np.count_nonzero(nbit); FLUSH[4] += nbit.size; FLUSH[5] += TBL[0]
        # streams: tile of 512 x 32 (one band) per plane; header 2 bytes + row-length table + 4-byte table entry
        # layout "rows": a stream per band-tile whose header lists each row's byte length (h entries of Lb bits);
        # with flush "min" a row's flush length is implied by its byte length (<= 2: all flush; else odd -> 3,
        # even -> 4): once a word is written the state stays >= L = 2^16, so the fewest bytes are 3 or 4.
        # layout "interleaved": the band-tile's rows share one word stream (a warp reads it in wavefront order, a
        # ballot and a prefix count per step); no row lengths, but each row's flush length in 2 bits (1-4 bytes).
        if cfg["layout"] == "interleaved":
            if cfg["flush"] != "4":
                rows = rows + (rows == 0)  # a 0 state is flushed as one byte: 2 bits say 1-4
            for ty in range(0, H, BAND):
                blk = rows[ty:ty + BAND]
                for tx in range(ntx):
                    r = blk[:, tx]
                    extra = 2 + 4 + ((2 * len(r) + 7) // 8 if cfg["flush"] != "4" else 0)
                    total += r.sum() + extra
                    FLUSH[2] += extra
        else:
            for ty in range(0, H, BAND):
                blk = rows[ty:ty + BAND]
                for tx in range(ntx):
                    r = blk[:, tx]
                    Lb = int(r.max()).bit_length()
                    total += r.sum() + 2 + (len(r) * Lb + 7) // 8 + 4
                    FLUSH[2] += 2 + (len(r) * Lb + 7) // 8 + 4
        if verify:
            dt = np.zeros_like(toks); dr = np.zeros_like(toks)
            ok = rans_decode_rows(words, nbit, ctx, tset, freq, cum, cfg["prec"], cfg["renorm"], Wd, dt, dr, cfg["k"], cfg["mb"], TW,
                                  small)
            ok = ok and np.array_equal(dt, toks) and np.array_equal(dr, raw)
            # rebuild residuals from tokens and compare with e
            if ok:
                kk, mb = cfg["k"], cfg["mb"]
                small = dt < (1 << kk)
                n = ((dt - (1 << kk)) >> mb) + kk
                nbits = n - mb
                mm = np.where(small, dt, ((1 << mb) | ((dt - (1 << kk)) & ((1 << mb) - 1))) << np.maximum(nbits, 0) | dr)
                d = np.where(mm & 1, -((mm + 1) >> 1), mm >> 1)
                ok = np.array_equal(d, e)
            if ok:
                # pixels from the decoded residuals alone (bias table as stored)
                rec = reconstruct(d.astype(np.int32), bias if cfg["bias"] else np.zeros(41, np.int32), bool(cfg["bias"]), TW)
                ok = np.array_equal(rec, prep.pls[pi])
            if not ok:
                raise SystemExit(f"ROUND TRIP FAILED plane {pi} cfg {cfg}")
    return total


FLUSH = np.zeros(6)
FLUSHED = np.zeros(1, np.int64)
TBL = np.zeros(1)  # final-state bytes, row streams, stream header + row table + stream-table bytes


BASE = dict(tw=512, bins=BINS14, ne=False, k=4, mb=1, prec=12, renorm=16, group_rows=0, bias=False,
            start="L", flush="4", layout="rows")
A = dict(group_rows=256, bias="choose")  # combination A's choices other than the width
FLUSH_STUDY = [  # issue #39 phase 1: the per-row final state at GPU-friendly widths
    ("A at width 512 (4-byte final state from L, row-length table)", dict(A)),
    ("A 512 + encoder starts from 0 (4-byte flush)", dict(A, start="zero")),
    ("A 512 + start 0 + fewest flush bytes (length from row-length parity)", dict(A, start="zero", flush="min")),
    ("A 512 + start 0 + fewest flush bytes + prec 11", dict(A, start="zero", flush="min", prec=11)),
    ("A 512, interleaved band stream, 4-byte flush from L", dict(A, layout="interleaved")),
    ("A 512, interleaved band stream + start 0 + fewest flush bytes (2 bits each)",
     dict(A, layout="interleaved", start="zero", flush="min")),
    ("A at width 1024 + start 0 + fewest flush bytes", dict(A, tw=1024, start="zero", flush="min")),
    ("A at width 2048 (4-byte final state from L)", dict(A, tw=2048)),
    ("A at width 2048 + start 0 + fewest flush bytes", dict(A, tw=2048, start="zero", flush="min")),
]
IDEAS = [
    ("baseline: 14 activity bins, k=4 mb=1, prec 12, 16-bit renorm, per-image tables, no bias", {}),
    ("4 bins", dict(bins=BINS4)),
    ("8 bins", dict(bins=BINS8)),
    ("token split k=3 mb=1", dict(k=3, mb=1)),
    ("token split k=5 mb=1", dict(k=5)),
    ("token split k=4 mb=0", dict(mb=0)),
    ("token split k=4 mb=2", dict(mb=2)),
    ("precision 10", dict(prec=10)),
    ("precision 11", dict(prec=11)),
    ("8-bit renormalisation (L=2^23)", dict(renorm=8)),
    ("tables per 256-row tile group", dict(group_rows=256)),
    ("tables per 32-row tile group (band row)", dict(group_rows=32)),
    ("static bias per 41 gradient contexts", dict(bias=True)),
    ("NE in activity (slope-2 wavefront)", dict(ne=True)),
    ("NE + bias", dict(ne=True, bias=True)),
    ("bias chosen per plane (1 bit)", dict(bias="choose")),
    ("tile width 1024", dict(tw=1024)),
    ("tile width 2048", dict(tw=2048)),
    ("combination A (slope 1): 256-row table groups, bias chosen per plane, width 2048", dict(group_rows=256, bias="choose", tw=2048)),
    ("combination B (slope 2): A + NE", dict(group_rows=256, bias="choose", tw=2048, ne=True)),
    ("combination A at prec 11 (smaller decode tables)", dict(group_rows=256, bias="choose", tw=2048, prec=11)),
    ("combination A at today's width 512", dict(group_rows=256, bias="choose")),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("images", nargs="+")
    ap.add_argument("--out")
    ap.add_argument("--verify", default=None, help="image to round-trip (default: the first)")
    ap.add_argument("--study", choices=["ideas", "flush"], default="ideas",
                    help="ideas: one idea at a time (the original table); flush: the final-state layouts at 512-2048")
    args = ap.parse_args()
    global IDEAS
    if args.study == "flush":
        IDEAS = FLUSH_STUDY
    import l3codec
    sets = {}
    for p in args.images:
        sets.setdefault(os.path.basename(os.path.dirname(p)), []).append(p)
    log = []
    def say(s):
        print(s, flush=True); log.append(s)
    t0 = time.time()
    # round trip check
    vpath = args.verify or args.images[0]
    prep = Prep(load(vpath))
    vcfgs = [BASE, dict(BASE, renorm=8, prec=10, bias=True, ne=True, group_rows=256, k=3, mb=2, tw=2048),
             dict(BASE, start="zero", flush="min", group_rows=256, bias=True)]
    for c in vcfgs:
        code_image(prep, c, verify=True)
    say(f"round trip: rANS decode of every row stream of {os.path.basename(vpath)} reproduced every token, raw bits "
        f"and residual, and the pixels rebuilt from the decoded residuals equal the source planes, for {len(vcfgs)} configurations "
        f"(16-bit/prec 12/width 512; 8-bit/prec 10/k=3 mb=2/bias/NE/256-row groups/width 2048; "
        f"16-bit/start 0/fewest flush bytes/bias/256-row groups/width 512)")
    res = {}
    for sname, paths in sets.items():
        agg = dict(src=0, compact=0, webp=0, samples=0, raw_syms=0)
        ideas = np.zeros(len(IDEAS))
        finals = np.zeros(len(IDEAS)); headers = np.zeros(len(IDEAS))
        for p in paths:
            rgb = load(p)
            if rgb is None:
                continue
            agg["src"] += os.path.getsize(p)
            agg["compact"] += len(l3codec.encode(rgb, mode="compact"))
            ok, wb = cv2.imencode(".webp", np.ascontiguousarray(rgb[..., ::-1]), [cv2.IMWRITE_WEBP_QUALITY, 101])
            agg["webp"] += len(wb)
            prep = Prep(rgb)
            agg["samples"] += rgb.size
            for i, (name, d) in enumerate(IDEAS):
                FLUSH[:] = 0
                ideas[i] += code_image(prep, dict(BASE, **d))
                finals[i] += FLUSH[0]; headers[i] += FLUSH[2]
                if i == 0:
                    agg["flush"] = agg.get("flush", 0) + FLUSH[0]; agg["rows"] = agg.get("rows", 0) + FLUSH[1]
                    agg["shdr"] = agg.get("shdr", 0) + FLUSH[2]
                    agg["raw"] = agg.get("raw", 0) + FLUSH[3]; agg["tbl"] = agg.get("tbl", 0) + FLUSH[5]
                if name.startswith("combination A (slope 1)") and i < len(IDEAS):
                    for kx, j in (("Aflush", 0), ("Arows", 1), ("Ashdr", 2), ("Araw", 3), ("Atbl", 5)):
                        agg[kx] = agg.get(kx, 0) + FLUSH[j]
            print(f"  {sname}/{os.path.basename(p)} done {time.time()-t0:.0f}s", flush=True)
        agg["finals"], agg["headers"] = finals, headers
        res[sname] = (agg, ideas)
    return res, log, sets


def combos(sets, chosen_list):
    out = {}
    import l3codec
    for sname, paths in sets.items():
        v = np.zeros(len(chosen_list))
        for p in paths:
            rgb = load(p)
            if rgb is None: continue
            prep = Prep(rgb)
            for i, (_, c) in enumerate(chosen_list):
                v[i] += code_image(prep, dict(BASE, **c))
        out[sname] = v
    return out


if __name__ == "__main__":
    res, log, sets = main()
    lines = []
    for sname, (agg, ideas) in res.items():
        src, comp, webp = agg["src"], agg["compact"], agg["webp"]
        lines.append(f"\n### {sname} ({len(sets[sname])} images, {agg['samples']:,} samples; sources {src:,} B; compact today {comp/src:.4f}x; WebP {webp/src:.4f}x)\n")
        if IDEAS is FLUSH_STUDY:
            lines.append("| layout | bytes | final states B | stream headers + row tables B | x sources | x WebP | vs first |")
            lines.append("|---|---:|---:|---:|---:|---:|---:|")
            for (name, _), b, f, h in zip(IDEAS, ideas, agg["finals"], agg["headers"]):
                lines.append(f"| {name} | {int(b):,} | {int(f):,} | {int(h):,} | {b/src:.4f} | {b/webp:.4f} | "
                             f"{100*(b/ideas[0]-1):+.2f}% |")
            continue
        lines.append(f"Baseline overheads: {int(agg['rows']):,} row streams; final states {int(agg['flush']):,} B "
                     f"({100*agg['flush']/ideas[0]:.1f}% of the baseline); stream headers + row-length tables + stream-table "
                     f"entries {int(agg['shdr']):,} B ({100*agg['shdr']/ideas[0]:.1f}%); tables {int(agg['tbl']):,} B; "
                     f"samples with raw bits {100*agg['raw']/agg['samples']:.2f}% (rANS symbols per sample {1+agg['raw']/agg['samples']:.3f}).\n")
        iA = [n for n, _ in IDEAS].index("combination A (slope 1): 256-row table groups, bias chosen per plane, width 2048")
        lines.append(f"Combination A overheads: {int(agg['Arows']):,} row streams; final states {int(agg['Aflush']):,} B "
                     f"({100*agg['Aflush']/ideas[iA]:.1f}%); stream headers + row tables + stream-table entries {int(agg['Ashdr']):,} B; "
                     f"tables {int(agg['Atbl']):,} B ({100*agg['Atbl']/ideas[iA]:.1f}%); rANS symbols per sample {1+agg['Araw']/agg['samples']:.3f}.\n")
        lines.append("| idea (one change from the baseline) | bytes | x sources | x compact today | x WebP | vs baseline |")
        lines.append("|---|---:|---:|---:|---:|---:|")
        for (name, _), b in zip(IDEAS, ideas):
            lines.append(f"| {name} | {int(b):,} | {b/src:.4f} | {b/comp:.4f} | {b/webp:.4f} | {100*(b/ideas[0]-1):+.2f}% |")
    print("\n".join(lines))
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "bench/results/compact-v2-model.tmp"
    with open(out, "w") as fh:
        fh.write("\n".join(log + lines) + "\n")
