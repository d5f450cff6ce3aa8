"""Near-linear alignment of two long, mostly-equal key sequences.

`align_sequences(a, b)` returns index pairs ``(i, j)``, strictly increasing in
both ``i`` and ``j``, with ``a[i] == b[j]``: a common subsequence that is a
longest one whenever the problem is small, and close to one on the long,
mostly-equal op recordings this package diffs. Pure Python, no dependencies.

Algorithm
---------
0. *Interning.* Every key is hashed once and replaced by a small int (the index
   of its first occurrence in ``a``). Keys that occur in only one of the two
   sequences can never be paired; those elements are dropped (an index map
   remembers the original positions). All later work compares ints, and lists
   of ints compare slice-against-slice at C speed. Two sequences with no key in
   common are finished here.

1. *Common prefix and suffix* are stripped by galloping slice comparisons
   (O(log L) Python steps for a run of length L).

2. *Small problems are solved exactly.* When a box ``a[i0:i1] x b[j0:j1]`` has at
   most ``cell_budget`` cells (``max_edit_cost**2`` clamped to
   [2**16, 2**24]; 4M cells by default) a true LCS is computed with the
   bit-parallel LCS recurrence of Allison-Dix / Hyyro (one Python big-int
   row per element of the shorter side, ``V' = ((V + U) | (V - U))`` with
   ``U = V & match_mask``), followed by a trace-back over the stored rows.
   Time O(n*m/64) machine words plus O(n + m) Python steps; memory n*m/8 bytes.

3. *Diagonal walk with local resynchronisation* (everything larger). Walk both
   sequences from the start, consuming equal runs by galloping. At a mismatch
   ``(i, j)`` look for the nearest place where the two sequences agree again on a
   whole ``K``-gram (``K = 8``): the offsets ``(di, dj)`` with the smallest
   ``di + dj`` such that ``a[i+di : i+di+K] == b[j+dj : j+dj+K]``. The search
   expands a radius ``r = 0, 1, 2, ...`` and hashes the K-gram at offset ``r`` of
   each side, so it costs O(r) for a resync found at distance r and is exact
   (smallest ``di + dj``) up to ``r = max_edit_cost``. The divergent box
   ``a[i:i+di] x b[j:j+dj]`` between the two synchronised points is then solved
   exactly (step 2; it always fits when found within ``max_edit_cost``), and
   the walk continues on the matching K-gram.

   Past ``max_edit_cost`` the search continues with a doubling radius but only
   indexes every K-th K-gram of ``a`` (any common run of length >= 2K-1 is still
   found), so a very large inserted or replaced block costs O(its length)
   time and O(its length / K) memory, not more. The work of every search is
   proportional to the distance the walk then advances, so the walk is linear
   overall: O((N + M) * K) Python-level work plus the exact box solves, whose
   cost per advanced element is bounded by ``sqrt(cell_budget) / 64`` words.

4. *Fallbacks for unrelated material.* When the rest of a range shares no
   common K-gram at all, it is anchored patience-diff style on keys occurring
   exactly once in both remaining ranges (longest increasing subsequence by
   patience sorting, O(u log u)); the gaps between anchors are processed again
   by steps 1-4 (at most ``_MAX_DEPTH`` nested levels, each level O(N)).
   Without unique anchors (or too deep) a greedy linear pass pairs each
   mismatching element with the nearest equal key within a 32-element
   look-ahead window (stretched on the longer side by the length ratio, so a
   short sequence embedded in a long one is still followed). Oversized divergent boxes found by the far search are
   pushed as sub-ranges (or handled by the greedy pass when too deep).

Bounds
------
Time: O(N + M) hashing plus near-linear work; mostly-equal inputs with D
scattered edits cost O(N + M) C-level comparisons plus O(D * edit size) Python
steps. Worst cases (two unrelated 1M sequences, one repeated key, a huge moved
block) stay linear or O(N log N): no O(N*M) table is ever built, the exact
solver is capped at ``cell_budget`` cells per box, and every loop is iterative
(an explicit stack, no recursion). Memory: O(N + M) plus O(cell_budget / 8)
bytes for the largest exact box.

The result is optimal (a true LCS) when ``len(a) * len(b)`` after prefix/suffix
stripping is within the cell budget; otherwise it is a heuristic that is exact
around each isolated edit region and keeps every pair monotone.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Hashable, Sequence
from itertools import compress, count, repeat

__all__ = ["align_sequences"]

Pair = tuple[int, int]
Run = tuple[int, int, int]  # (i, j, length): a[i+t] == b[j+t] for t < length
Range = tuple[int, int, int, int, int]  # (alo, ahi, blo, bhi, depth)

_GRAM = 8  # K: length of the exact agreement that resynchronises the walk
_LOOKAHEAD = 32  # window of the greedy fallback
_MIN_EXACT_CELLS = 1 << 16  # boxes this small are always solved exactly
_MAX_EXACT_CELLS = 1 << 24  # never build more bit-parallel rows than this
_MAX_DEPTH = 3  # nesting of patience anchoring / oversized-box sub-ranges
_STEP_CAP = 1 << 14  # largest slice compared at once while galloping


def align_sequences(
    a: Sequence[Hashable], b: Sequence[Hashable], *, max_edit_cost: int = 2000
) -> list[tuple[int, int]]:
    """Pair equal elements of ``a`` and ``b`` in order, approximating a longest common subsequence.

    Returns a list of ``(i, j)`` with ``a[i] == b[j]``, strictly increasing in
    both coordinates. Keys are opaque hashables (op names, tuples of op name and
    shapes, ...). Exact (a true LCS) for problems of at most about
    ``max_edit_cost**2`` cells after the common prefix and suffix are removed;
    otherwise near-optimal around each divergent region, in near-linear time and
    linear memory (see the module docstring).

    ``max_edit_cost`` bounds the exact work: the nearest resynchronisation point
    after a mismatch is searched exhaustively within this many elements of each
    sequence, and divergent boxes up to ``max_edit_cost**2`` cells (clamped to
    [2**16, 2**24]) are aligned optimally. Larger regions fall back to sampled
    search, unique-key anchoring and a greedy look-ahead pass.
    """
    if max_edit_cost < 0:
        raise ValueError(f"max_edit_cost must be >= 0, got {max_edit_cost!r}")
    A, B, amap, bmap = _intern(a, b)
    runs: list[Run] = []
    if A and B:
        budget = max(_MIN_EXACT_CELLS, min(max_edit_cost * max_edit_cost, _MAX_EXACT_CELLS))
        _align(A, B, runs, max_edit_cost, budget)
    return _expand(runs, amap, bmap)


# --------------------------------------------------------------------------- driver


def _align(A: list[int], B: list[int], runs: list[Run], radius: int, budget: int) -> None:
    stack: list[Range] = [(0, len(A), 0, len(B), 0)]
    while stack:
        alo, ahi, blo, bhi, depth = stack.pop()
        alo, ahi, blo, bhi = _strip(A, B, alo, ahi, blo, bhi, runs)
        if alo >= ahi or blo >= bhi:
            continue
        if (ahi - alo) * (bhi - blo) <= budget:
            _lcs_exact(A, B, alo, ahi, blo, bhi, runs)
        else:
            _walk(A, B, alo, ahi, blo, bhi, depth, runs, stack, radius, budget)


def _walk(
    A: list[int],
    B: list[int],
    alo: int,
    ahi: int,
    blo: int,
    bhi: int,
    depth: int,
    runs: list[Run],
    stack: list[Range],
    radius: int,
    budget: int,
) -> None:
    """Step 3: follow the diagonal, resynchronising on K-grams after each mismatch."""
    i, j = alo, blo
    while i < ahi and j < bhi:
        if A[i] == B[j]:
            n = _fwd_run(A, B, i, j, min(ahi - i, bhi - j))
            runs.append((i, j, n))
            i += n
            j += n
            continue
        if (ahi - i) * (bhi - j) <= budget:
            _lcs_exact(A, B, i, ahi, j, bhi, runs)
            return
        hit = _resync(A, B, i, ahi, j, bhi, radius)
        if hit is None:
            # Nothing of length K in common anywhere in the rest of the range.
            if depth < _MAX_DEPTH and _patience(A, B, i, ahi, j, bhi, depth, runs, stack):
                return
            _greedy(A, B, i, ahi, j, bhi, runs)
            return
        di, dj = hit
        if di and dj:
            if di * dj <= budget:
                _lcs_exact(A, B, i, i + di, j, j + dj, runs)
            elif depth < _MAX_DEPTH:
                stack.append((i, i + di, j, j + dj, depth + 1))
            else:
                _greedy(A, B, i, i + di, j, j + dj, runs)
        i += di
        j += dj


# --------------------------------------------------------------------------- interning / output


def _intern(
    a: Sequence[Hashable], b: Sequence[Hashable]
) -> tuple[list[int], list[int], array | None, array | None]:
    """Map keys to shared small ints; drop elements whose key is absent from the other side."""
    ids: dict[Hashable, int] = {}
    A = list(map(ids.setdefault, a, count()))
    B = list(map(ids.get, b, repeat(-1)))
    common = set(B)
    b_all = -1 not in common
    common.discard(-1)
    amap: array | None = None
    bmap: array | None = None
    if len(common) < len(ids):
        keep = list(map(common.__contains__, A))
        amap = array("q", compress(range(len(A)), keep))
        A = list(compress(A, keep))
    if not b_all:
        keep = [x >= 0 for x in B]
        bmap = array("q", compress(range(len(B)), keep))
        B = list(compress(B, keep))
    return A, B, amap, bmap


def _expand(runs: list[Run], amap: array | None, bmap: array | None) -> list[Pair]:
    runs.sort()
    out: list[Pair] = []
    extend = out.extend
    for i, j, n in runs:
        ia = amap[i : i + n] if amap is not None else range(i, i + n)
        jb = bmap[j : j + n] if bmap is not None else range(j, j + n)
        extend(zip(ia, jb))
    return out


def _add_pairs(runs: list[Run], pairs: list[Pair]) -> None:
    """Append ascending pairs to ``runs``, merging consecutive diagonal pairs."""
    if not pairs:
        return
    si, sj = pairs[0]
    n = 1
    for i, j in pairs[1:]:
        if i == si + n and j == sj + n:
            n += 1
        else:
            runs.append((si, sj, n))
            si, sj, n = i, j, 1
    runs.append((si, sj, n))


# --------------------------------------------------------------------------- equal runs


def _fwd_run(A: list[int], B: list[int], i: int, j: int, lim: int) -> int:
    """Length of the common run ``A[i:] / B[j:]`` (at most ``lim``), by galloping slice compares."""
    n = 0
    step = 1
    while n < lim:
        s = min(step, lim - n)
        if A[i + n : i + n + s] == B[j + n : j + n + s]:
            n += s
            if step < _STEP_CAP:
                step <<= 1
            continue
        while s > 1:  # the first mismatch lies in [n, n + s)
            h = s >> 1
            if A[i + n : i + n + h] == B[j + n : j + n + h]:
                n += h
                s -= h
            else:
                s = h
        return n
    return n


def _bwd_run(A: list[int], B: list[int], ie: int, je: int, lim: int) -> int:
    """Length of the common run ending just before ``A[ie] / B[je]`` (at most ``lim``)."""
    n = 0
    step = 1
    while n < lim:
        s = min(step, lim - n)
        if A[ie - n - s : ie - n] == B[je - n - s : je - n]:
            n += s
            if step < _STEP_CAP:
                step <<= 1
            continue
        while s > 1:
            h = s >> 1
            if A[ie - n - h : ie - n] == B[je - n - h : je - n]:
                n += h
                s -= h
            else:
                s = h
        return n
    return n


def _strip(
    A: list[int], B: list[int], alo: int, ahi: int, blo: int, bhi: int, runs: list[Run]
) -> tuple[int, int, int, int]:
    """Step 1: emit the common prefix and suffix of the range and return what is left."""
    if alo < ahi and blo < bhi and A[alo] == B[blo]:
        n = _fwd_run(A, B, alo, blo, min(ahi - alo, bhi - blo))
        runs.append((alo, blo, n))
        alo += n
        blo += n
    if alo < ahi and blo < bhi and A[ahi - 1] == B[bhi - 1]:
        n = _bwd_run(A, B, ahi, bhi, min(ahi - alo, bhi - blo))
        runs.append((ahi - n, bhi - n, n))
        ahi -= n
        bhi -= n
    return alo, ahi, blo, bhi


# --------------------------------------------------------------------------- exact LCS


def _lcs_exact(A: list[int], B: list[int], alo: int, ahi: int, blo: int, bhi: int, runs: list[Run]) -> None:
    """Step 2: a true LCS of ``A[alo:ahi]`` and ``B[blo:bhi]`` by bit-parallel rows and trace-back."""
    swap = (ahi - alo) > (bhi - blo)
    if swap:  # rows over the shorter side, bits over the longer one
        X, Y = B[blo:bhi], A[alo:ahi]
    else:
        X, Y = A[alo:ahi], B[blo:bhi]
    nx, ny = len(X), len(Y)
    if nx == 0:
        return
    found: list[Pair] = []
    if nx == 1:
        x = X[0]
        if x in Y:
            found.append((0, Y.index(x)))
    else:
        need = set(X)
        pos: dict[int, list[int]] = {}
        for q, y in enumerate(Y):
            if y in need:
                lst = pos.get(y)
                if lst is None:
                    pos[y] = [q]
                else:
                    lst.append(q)
        if not pos:
            return
        nbytes = (ny + 7) >> 3
        masks: dict[int, int] = {}
        for key, qs in pos.items():
            buf = bytearray(nbytes)
            for q in qs:
                buf[q >> 3] |= 1 << (q & 7)
            masks[key] = int.from_bytes(buf, "little")
        # Bit q of row V_r is 0 iff LCS(X[:r], Y[:q+1]) == LCS(X[:r], Y[:q]) + 1.
        full = (1 << ny) - 1
        V = full
        rows = [V]
        get = masks.get
        for x in X:
            M = get(x)
            if M is not None:
                U = V & M
                V = ((V + U) | (V - U)) & full
            rows.append(V)
        r, c = nx, ny
        while r and c:
            V = rows[r]
            if (V >> (c - 1)) & 1:  # L[r][c] == L[r][c-1]: skip left to the nearest 0 bit
                zeros = ~V & ((1 << c) - 1)
                if not zeros:
                    break  # L[r][c] == 0
                c = zeros.bit_length()
                continue
            W = rows[r - 1]
            if W is V:
                r -= 1
                continue
            low = (1 << c) - 1
            if (W & low).bit_count() == (V & low).bit_count():  # L[r-1][c] == L[r][c]
                r -= 1
                continue
            found.append((r - 1, c - 1))  # X[r-1] == Y[c-1] on an optimal path
            r -= 1
            c -= 1
        found.reverse()
    if swap:
        _add_pairs(runs, [(alo + q, blo + p) for p, q in found])
    else:
        _add_pairs(runs, [(alo + p, blo + q) for p, q in found])


# --------------------------------------------------------------------------- resynchronisation


def _resync(A: list[int], B: list[int], i: int, ahi: int, j: int, bhi: int, radius: int) -> Pair | None:
    """Offsets ``(di, dj)`` of the nearest common K-gram after ``(i, j)``, or None if there is none."""
    k = min(_GRAM, ahi - i, bhi - j)
    la = ahi - i - k + 1  # valid K-gram offsets on each side
    lb = bhi - j - k + 1
    span = max(la, lb)
    best: Pair | None = None
    cost = 2 * span + 1
    lim = min(radius, span)
    # Exhaustive phase: every pair with max(di, dj) == r is examined at step r,
    # so stopping once r reaches the best di + dj so far is exact.
    seen_a: dict[tuple[int, ...], int] = {}
    seen_b: dict[tuple[int, ...], int] = {}
    r = 0
    while r < lim and r < cost:
        if r < la:
            g = tuple(A[i + r : i + r + k])
            if g not in seen_a:
                seen_a[g] = r
                q = seen_b.get(g)
                if q is not None and r + q < cost:
                    cost = r + q
                    best = (r, q)
        if r < lb:
            g = tuple(B[j + r : j + r + k])
            if g not in seen_b:
                seen_b[g] = r
                p = seen_a.get(g)
                if p is not None and p + r < cost:
                    cost = p + r
                    best = (p, r)
        r += 1
    if best is not None:
        return best
    if lim >= span:
        return None
    del seen_a, seen_b
    # Far phase: doubling radius, index every k-th K-gram of A, scan every K-gram of B.
    R = max(2 * lim, 256)
    while True:
        ra, rb = min(R, la), min(R, lb)
        index: dict[tuple[int, ...], int] = {}
        for p in range(0, ra, k):
            g = tuple(A[i + p : i + p + k])
            if g not in index:
                index[g] = p
        get = index.get
        for q in range(rb):
            if q >= cost:
                break
            p = get(tuple(B[j + q : j + q + k]))
            if p is not None and p + q < cost:
                cost = p + q
                best = (p, q)
        if best is not None:
            p, q = best
            while p and q and A[i + p - 1] == B[j + q - 1]:  # the run may start before the sample
                p -= 1
                q -= 1
            return p, q
        if ra >= la and rb >= lb:
            return None
        R *= 2


# --------------------------------------------------------------------------- fallbacks


def _patience(
    A: list[int],
    B: list[int],
    alo: int,
    ahi: int,
    blo: int,
    bhi: int,
    depth: int,
    runs: list[Run],
    stack: list[Range],
) -> bool:
    """Anchor on keys unique in both ranges (LIS by patience sorting); push the gaps. False if none."""
    ca = Counter(A[alo:ahi])
    cb = Counter(B[blo:bhi])
    uniq = {x for x, c in ca.items() if c == 1 and cb[x] == 1}
    if not uniq:
        return False
    posb = {x: q for q, x in enumerate(B[blo:bhi], blo) if x in uniq}
    seq_i = [p for p, x in enumerate(A[alo:ahi], alo) if x in uniq]
    seq_j = [posb[A[p]] for p in seq_i]
    tails: list[int] = []
    tail_at: list[int] = []
    prev = [-1] * len(seq_j)
    for t, v in enumerate(seq_j):
        pos = len(tails) if not tails or v > tails[-1] else bisect_left(tails, v)
        if pos == len(tails):
            tails.append(v)
            tail_at.append(t)
        else:
            tails[pos] = v
            tail_at[pos] = t
        if pos:
            prev[t] = tail_at[pos - 1]
    chain: list[Pair] = []
    t = tail_at[-1]
    while t >= 0:
        chain.append((seq_i[t], seq_j[t]))
        t = prev[t]
    chain.reverse()
    _add_pairs(runs, chain)
    pi, pj = alo - 1, blo - 1
    for ci, cj in [*chain, (ahi, bhi)]:
        if ci - pi > 1 and cj - pj > 1:
            stack.append((pi + 1, ci, pj + 1, cj, depth + 1))
        pi, pj = ci, cj
    return True


def _greedy(A: list[int], B: list[int], i: int, ahi: int, j: int, bhi: int, runs: list[Run]) -> None:
    """Linear fallback: at a mismatch, jump to the nearest equal key within a look-ahead window.

    The window on the longer side is stretched by the length ratio, and skips are
    compared as fractions of each side, so a short sequence embedded in a long one
    is still followed. Every step advances ``i`` or ``j``; a window is scanned only
    up to its first hit, so the pass is O((len_a + len_b) * _LOOKAHEAD).
    """
    na = max(1, ahi - i)
    nb = max(1, bhi - j)
    wa = _LOOKAHEAD * max(1, na // nb)
    wb = _LOOKAHEAD * max(1, nb // na)
    a_index = A.index
    b_index = B.index
    while i < ahi and j < bhi:
        x = A[i]
        y = B[j]
        if x == y:
            n = _fwd_run(A, B, i, j, min(ahi - i, bhi - j))
            runs.append((i, j, n))
            i += n
            j += n
            continue
        try:
            p = a_index(y, i + 1, min(ahi, i + 1 + wa)) - i
        except ValueError:
            p = 0
        try:
            q = b_index(x, j + 1, min(bhi, j + 1 + wb)) - j
        except ValueError:
            q = 0
        if p and (not q or p * nb <= q * na):
            i += p
        elif q:
            j += q
        else:
            i += 1
            j += 1
