// The shapes family's long kernels (the shape-set DPs and local moves) and their bindings.
#include "shapes.hpp"

#include <nanobind/stl/tuple.h>

#include "checks.hpp"
#include "common.hpp"

namespace padless {

using shapes_detail::floor_div;

// Split sorted distinct `values` (with `counts`) into at most `k` contiguous groups that
// minimise the static cost; the index of each group's last value but the last.
//
// A group i..j−1 is served by one shape of length values[j−1] and rows[j−1] rows: its cost is
// its items rounded up to whole batches of that many rows, times the length,
// ceil(n / r) · r · v. Fewer groups win ties, then a shorter last group. Exact DP over groups:
// for each end j the start i is scanned downward and the scan stops once the group's cost
// without its padding (real tokens before i, plus the group's items at full length) reaches
// the best found, a lower bound that only grows as i falls. O(k · L²) time at worst (much less
// in practice), O(k · L) memory (int32 table); exact int64 arithmetic.
Buffer<int64_t> static_cuts(const int64_t* values, const int64_t* counts, const int64_t* rows,
                            int64_t n, int64_t k) {
    int64_t groups = k < n ? k : n;
    if (groups <= 1) return Buffer<int64_t>(0);
    std::vector<int64_t> csum(static_cast<size_t>(n + 1), 0);
    std::vector<int64_t> tokens(static_cast<size_t>(n + 1), 0);
    for (int64_t j = 0; j < n; ++j) {
        csum[j + 1] = csum[j] + counts[j];
        tokens[j + 1] = tokens[j] + counts[j] * values[j];
    }
    std::vector<int64_t> prev(static_cast<size_t>(n + 1));
    std::vector<int64_t> cur(static_cast<size_t>(n + 1));
    prev[0] = 0;
    for (int64_t j = 1; j <= n; ++j) {
        int64_t r = rows[j - 1];
        prev[j] = (csum[j] + r - 1) / r * r * values[j - 1];  // all >= 0: / is //
    }
    const int64_t width = n + 1;
    std::vector<int32_t> best(static_cast<size_t>((groups + 1) * width), 0);
    for (int64_t m = 2; m <= groups; ++m) {
        int32_t* best_m = best.data() + m * width;
        cur[0] = 0;
        for (int64_t j = 1; j <= n; ++j) {
            int64_t v = values[j - 1];
            int64_t r = rows[j - 1];
            int64_t top = csum[j];
            int64_t val = prev[j];  // at most m - 1 groups
            int64_t arg = j;
            for (int64_t i = j - 1; i >= 0; --i) {
                int64_t items = top - csum[i];
                if (tokens[i] + items * v >= val) break;
                int64_t c = prev[i] + (items + r - 1) / r * r * v;
                if (c < val) {
                    val = c;
                    arg = i;
                }
            }
            cur[j] = val;
            best_m[j] = static_cast<int32_t>(arg);
        }
        prev.swap(cur);
    }
    Buffer<int64_t> out(groups);
    int64_t num = 0;
    int64_t j = n;
    int64_t m = groups;
    while (m >= 2 && j > 0) {
        int64_t i = best[static_cast<size_t>(m * width + j)];
        if (i < j && i > 0) out[num++] = i - 1;
        if (i < j) j = i;
        --m;
    }
    Buffer<int64_t> res(num);
    for (int64_t q = 0; q < num; ++q) res[q] = out[num - 1 - q];
    return res;
}

// Improve group ends against shaped_cost by local moves; the ends and their cost.
//
// Repeats passes until none improves: move each interior end to every position between its
// neighbours, then drop each interior end (one shape fewer), keeping any strict improvement.
// The result never costs more than the input. O(passes · L · shapes²) time.
int64_t polish_ends(const int64_t* values, const int64_t* counts, const int64_t* rows, int64_t n,
                    const int64_t* ends, int64_t num_ends, Buffer<int64_t>& out) {
    std::vector<int64_t> csum = shapes_detail::prefix(counts, n);
    std::vector<int64_t> cur(ends, ends + num_ends);
    auto cost_of = [&](const std::vector<int64_t>& e) {
        return shapes_detail::cost_of_ends(csum.data(), values, rows, e.data(),
                                           static_cast<int64_t>(e.size()));
    };
    int64_t best = cost_of(cur);
    std::vector<int64_t> fewer;
    bool improved = true;
    while (improved) {
        improved = false;
        const int64_t moves = static_cast<int64_t>(cur.size()) - 1;
        for (int64_t t = 0; t < moves; ++t) {
            int64_t lo = t > 0 ? cur[t - 1] + 1 : 0;
            int64_t hi = cur[t + 1] - 1;
            int64_t keep = cur[t];
            for (int64_t p = lo; p <= hi; ++p) {
                if (p == keep) continue;
                cur[t] = p;
                int64_t c = cost_of(cur);
                if (c < best) {
                    best = c;
                    keep = p;
                    improved = true;
                }
            }
            cur[t] = keep;
        }
        int64_t t = 0;
        while (t < static_cast<int64_t>(cur.size()) - 1) {
            fewer.assign(cur.begin(), cur.begin() + t);
            fewer.insert(fewer.end(), cur.begin() + t + 1, cur.end());
            int64_t c = cost_of(fewer);
            if (c < best) {
                best = c;
                cur.swap(fewer);
                improved = true;
            } else {
                ++t;
            }
        }
    }
    out = Buffer<int64_t>(static_cast<int64_t>(cur.size()));
    std::copy(cur.begin(), cur.end(), out.get());
    return best;
}

// Group ends for at most `k` shapes minimising shaped_cost exactly.
//
// DP over (groups used, group end j, open-batch count c): the plan's greedy walk, group by
// group, is fully described by the count of the batch left open at a group's end (its longest
// is that group's length). From each state the next group [i, j) either takes the open batch
// (when one more row fits its shape) or closes it first; a closed batch pads to its own group's
// shape, or to the next one when that holds exactly as many rows for fewer slots (the cheapest
// shape that holds it: rows do not increase along the shapes). The closing branch needs only
// the cheapest state with at least rows[j − 1] open rows (a suffix minimum), so the work is
// O(k · Σ_j min(rows_j, rows_i) over pairs i < j) and the table O(k · states), states =
// Σ_j min(rows_j, items up to j). Ties keep fewer shapes. Returns ascending ends.
//
// `bound` is the cost of any feasible set of ends (at most k groups): states and groups that
// cannot end below it are skipped. A state's closed batches plus every later token at its own
// length is a lower bound on where it can end, and for a start i that bound only grows with
// the end j (longer groups pad more), so each start's scan stops early. With a bound near the
// optimum this prunes most of the work; the result is the same for any valid bound.
Buffer<int64_t> carry_cuts(const int64_t* values, const int64_t* counts, const int64_t* rows,
                           int64_t n, int64_t k, int64_t bound) {
    const int64_t groups = k < n ? k : n;
    std::vector<int64_t> csum = shapes_detail::prefix(counts, n);
    std::vector<int64_t> tokens(static_cast<size_t>(n + 1), 0);
    for (int64_t j = 0; j < n; ++j) tokens[j + 1] = tokens[j] + counts[j] * values[j];
    // carry states of every group end: end j (values < j planned) has one state per open-batch
    // count 1..min(rows[j − 1], items so far), at off[j] + count − 1
    std::vector<int64_t> off(static_cast<size_t>(n + 2), 0);
    for (int64_t j = 1; j <= n; ++j) {
        int64_t cap = rows[j - 1] < csum[j] ? rows[j - 1] : csum[j];
        off[j + 1] = off[j] + cap;
    }
    const int64_t states = off[n + 1];
    const int64_t inf = int64_t{1} << 62;
    const int64_t levels = groups + 1 > 0 ? groups + 1 : 0;
    std::vector<int64_t> cost(static_cast<size_t>(levels * states), inf);
    std::vector<int32_t> from_i(static_cast<size_t>(levels * states), -1);
    std::vector<int32_t> from_c(static_cast<size_t>(levels * states), 0);
    if (levels > 1) {
        int64_t* first = cost.data() + states;
        for (int64_t j = 1; j <= n; ++j) {
            int64_t r = rows[j - 1];
            int64_t items = csum[j];
            int64_t full = floor_div(items - 1, r);
            int64_t c = items - full * r;
            if (c <= off[j + 1] - off[j]) first[off[j] + c - 1] = full * r * values[j - 1];
        }
    }
    int64_t widest = 1;
    for (int64_t j = 1; j <= n; ++j) {
        if (off[j + 1] - off[j] > widest) widest = off[j + 1] - off[j];
    }
    std::vector<int64_t> suf(static_cast<size_t>(widest + 1));
    std::vector<int64_t> sufarg(static_cast<size_t>(widest + 1));
    std::vector<int64_t> live_c(static_cast<size_t>(widest));
    std::vector<int64_t> live_cost(static_cast<size_t>(widest));
    for (int64_t m = 2; m <= groups; ++m) {
        const int64_t* before = cost.data() + (m - 1) * states;
        int64_t* now = cost.data() + m * states;
        int32_t* now_i = from_i.data() + m * states;
        int32_t* now_c = from_c.data() + m * states;
        std::copy(before, before + states, now);  // at most m - 1 groups: from_i stays -1
        for (int64_t i = 1; i < n; ++i) {
            const int64_t ri = rows[i - 1];
            const int64_t vi = values[i - 1];
            const int64_t cap_i = off[i + 1] - off[i];
            if (cap_i <= 0) continue;  // no items before i: no state to start from
            const int64_t* at_i = before + off[i];
            suf[cap_i] = at_i[cap_i - 1];
            sufarg[cap_i] = cap_i;
            for (int64_t c = cap_i - 1; c > 0; --c) {
                int64_t here = at_i[c - 1];
                if (here <= suf[c + 1]) {
                    suf[c] = here;
                    sufarg[c] = c;
                } else {
                    suf[c] = suf[c + 1];
                    sufarg[c] = sufarg[c + 1];
                }
            }
            if (suf[1] >= inf || suf[1] + tokens[n] - tokens[i] > bound) continue;
            // the open counts from which some group can still end below the bound (the open
            // batch's rows pad to at least the length they reached)
            int64_t alive = 0;
            int64_t lowest = inf;
            for (int64_t c = 1; c <= cap_i; ++c) {
                int64_t here = at_i[c - 1];
                if (here < inf && here + c * vi + tokens[n] - tokens[i] <= bound) {
                    live_c[alive] = c;
                    live_cost[alive] = here;
                    ++alive;
                    if (here + c * vi < lowest) lowest = here + c * vi;
                }
            }
            if (alive == 0) continue;
            for (int64_t j = i + 1; j <= n; ++j) {
                const int64_t r = rows[j - 1];
                const int64_t v = values[j - 1];
                const int64_t items = csum[j] - csum[i];
                if (lowest + items * v + tokens[n] - tokens[j] > bound) {
                    break;  // no state from i ends below the bound through j or beyond
                }
                const int64_t* at_j = now + off[j];
                const int64_t cap_j = off[j + 1] - off[j];
                // close the open batch first: any count >= r (it cannot take one more row)
                if (r <= cap_i && suf[r] < inf) {
                    int64_t val = suf[r] + ri * vi;
                    int64_t arg = sufarg[r];
                    int64_t at_r = at_i[r - 1];
                    if (at_r < inf && r * v < ri * vi && at_r + r * v < val) {
                        val = at_r + r * v;
                        arg = r;
                    }
                    int64_t full = floor_div(items - 1, r);
                    int64_t c2 = items - full * r;
                    val += full * r * v;
                    int64_t dst = off[j] + c2 - 1;
                    if (c2 <= cap_j && val < at_j[c2 - 1]) {
                        now[dst] = val;
                        now_i[dst] = static_cast<int32_t>(i);
                        now_c[dst] = static_cast<int32_t>(arg);
                    }
                }
                // or take it: counts 1..r - 1
                // c + items rows: whole batches of r, then c2 = c + a (or c + a - r, one more
                // batch) rows left open; no division per state
                const int64_t limit = bound - tokens[n] + tokens[j] - items * v;
                const int64_t a = items % r;
                const int64_t paid = items / r * r * v;
                for (int64_t q = 0; q < alive; ++q) {
                    const int64_t c = live_c[q];
                    if (c >= r) break;
                    const int64_t here = live_cost[q];
                    if (here + c * v > limit) continue;
                    int64_t c2;
                    int64_t val;
                    if (c + a <= r) {
                        c2 = c + a;
                        val = here + paid;
                    } else {
                        c2 = c + a - r;
                        val = here + paid + r * v;
                    }
                    int64_t dst = off[j] + c2 - 1;
                    if (val < now[dst]) {
                        now[dst] = val;
                        now_i[dst] = static_cast<int32_t>(i);
                        now_c[dst] = static_cast<int32_t>(c);
                    }
                }
            }
        }
    }
    int64_t best = inf;
    int64_t at = 0;
    if (levels > 0) {
        const int64_t* last = cost.data() + groups * states + off[n];
        for (int64_t c = 1; c <= off[n + 1] - off[n]; ++c) {
            if (last[c - 1] < best) {
                best = last[c - 1];
                at = c;
            }
        }
    }
    Buffer<int64_t> out(groups > 1 ? groups : 1);
    int64_t num = 0;
    out[num++] = n - 1;
    int64_t m = groups;
    int64_t j = n;
    int64_t c = at;
    while (m >= 2) {
        int64_t s = off[j] + c - 1;
        int64_t i = from_i[static_cast<size_t>(m * states + s)];
        if (i >= 0) {
            out[num++] = i - 1;
            c = from_c[static_cast<size_t>(m * states + s)];
            j = i;
        }
        --m;
    }
    Buffer<int64_t> res(num);
    for (int64_t q = 0; q < num; ++q) res[q] = out[num - 1 - q];
    return res;
}

namespace {

int64_t length(const In<int64_t>& a) { return static_cast<int64_t>(a.shape(0)); }

// The shapes the greedy walk cuts to: tier lengths strictly ascending, their caps (rows) at
// least one and not increasing, one per tier.
void check_tiers(const char* kernel, const In<int64_t>& tiers, const In<int64_t>& caps,
                 int64_t num_sizes) {
    check_same_size(kernel, "tiers", length(tiers), "caps", length(caps));
    if (num_sizes > 0 && length(tiers) == 0) refuse(kernel, "tiers is empty: no shape fits");
    for (int64_t t = 0; t < length(tiers); ++t) {
        if (t > 0 && !(tiers(t - 1) < tiers(t))) {
            refuse(kernel, entry("tiers", t, tiers(t)) + " is not above " +
                               entry("tiers", t - 1, tiers(t - 1)) +
                               " (tiers must be sorted and distinct)");
        }
        if (caps(t) < 1) refuse(kernel, entry("caps", t, caps(t)) + " must be >= 1");
        if (t > 0 && caps(t) > caps(t - 1)) {
            refuse(kernel, entry("caps", t, caps(t)) + " is above " +
                               entry("caps", t - 1, caps(t - 1)) + " (caps must not increase)");
        }
    }
}

template <class T>
nb::tuple shape_ends_py(In<T> sizes, In<int64_t> tiers, In<int64_t> caps) {
    const char* kernel = "shape_ends";
    check_tiers(kernel, tiers, caps, static_cast<int64_t>(sizes.shape(0)));
    Buffer<int64_t> ends;
    Buffer<int64_t> longest;
    int64_t over;
    {
        nb::gil_scoped_release nogil;
        over = shape_ends(sizes.data(), static_cast<int64_t>(sizes.shape(0)), tiers.data(),
                          length(tiers), caps.data(), ends, longest);
    }
    if (over >= 0) {
        refuse(kernel, entry("sizes", over, sizes(over)) + " exceeds the longest tier, " +
                           entry("tiers", length(tiers) - 1, tiers(length(tiers) - 1)));
    }
    return nb::make_tuple(to_numpy(std::move(ends)), to_numpy(std::move(longest)));
}

Out<int64_t> pick_shapes_py(In<int64_t> counts, In<int64_t> longest, In<int64_t> rows,
                            In<int64_t> lengths, bool pad_batches) {
    const char* kernel = "pick_shapes";
    check_same_size(kernel, "counts", length(counts), "longest", length(longest));
    check_same_size(kernel, "rows", length(rows), "lengths", length(lengths));
    // the shapes by length (a binary search finds the first long enough), their slots exact
    for (int64_t s = 0; s < length(rows); ++s) {
        if (rows(s) < 1) refuse(kernel, entry("rows", s, rows(s)) + " must be >= 1");
        if (lengths(s) < 1) refuse(kernel, entry("lengths", s, lengths(s)) + " must be >= 1");
        if (s > 0 && lengths(s) < lengths(s - 1)) {
            refuse(kernel, entry("lengths", s, lengths(s)) + " is below " +
                               entry("lengths", s - 1, lengths(s - 1)) +
                               " (shapes must be sorted by length)");
        }
        if (mul_exceeds(rows(s), lengths(s), INT64_MAX_)) {
            refuse(kernel, "shape " + text(s) + " (rows " + text(rows(s)) + ", length " +
                               text(lengths(s)) + ") has more than 2**63 - 1 slots");
        }
    }
    Buffer<int64_t> out(length(counts));
    {
        nb::gil_scoped_release nogil;
        pick_shapes(counts.data(), longest.data(), out.used, rows.data(), lengths.data(),
                    length(rows), pad_batches, out.get());
    }
    return to_numpy(std::move(out));
}

// The most a cost of the shape-set kernels may reach: their sums of a few costs stay below
// 2**62 (the DPs' "unreachable") and below 2**63.
constexpr int64_t MAX_SLOTS = int64_t(1) << 60;

// The histogram the shape-set kernels take: sorted distinct sizes (`values`), the items of each
// (`counts`, at least one) and the rows of the shape of each length (`rows`, at least one: the
// kernels divide by them). Every cost they add up is at most all the items at the longest size
// plus `groups` batches of the largest shape, which must stay within MAX_SLOTS.
void check_table(const char* kernel, const In<int64_t>& values, const In<int64_t>& counts,
                 const In<int64_t>& rows, int64_t groups) {
    const int64_t n = length(values);
    check_same_size(kernel, "values", n, "counts", length(counts));
    check_same_size(kernel, "values", n, "rows", length(rows));
    int64_t items = 0, widest = 0;
    for (int64_t j = 0; j < n; ++j) {
        if (values(j) < 0) refuse(kernel, entry("values", j, values(j)) + " is negative");
        if (j > 0 && !(values(j - 1) < values(j))) {
            refuse(kernel, entry("values", j, values(j)) + " is not above " +
                               entry("values", j - 1, values(j - 1)) +
                               " (values must be sorted and distinct)");
        }
        if (counts(j) < 1) refuse(kernel, entry("counts", j, counts(j)) + " must be >= 1");
        if (rows(j) < 1) refuse(kernel, entry("rows", j, rows(j)) + " must be >= 1");
        items = sat_add(items, counts(j));
        widest = std::max(widest, sat_mul(rows(j), values(j)));
    }
    const int64_t longest = n > 0 ? values(n - 1) : 0;
    if (sat_add(sat_mul(items, longest), sat_mul(std::max(groups, int64_t(0)), widest)) >
        MAX_SLOTS) {
        refuse(kernel, text(items) + " items at the longest size " + text(longest) + " plus " +
                           text(groups) + " batches of the largest shape (" + text(widest) +
                           " slots) pass 2**60 slots (costs would overflow)");
    }
}

// Group ends of the table: ascending positions in [0, n), the last n - 1 (every size in a group).
void check_ends(const char* kernel, const In<int64_t>& ends, int64_t n) {
    const int64_t num = length(ends);
    if (num == 0 && n > 0) refuse(kernel, "ends is empty (the last must be n - 1)");
    for (int64_t s = 0; s < num; ++s) {
        if (ends(s) < 0 || ends(s) >= n) {
            refuse(kernel, entry("ends", s, ends(s)) + " is outside [0, " + text(n) + ")");
        }
        if (s > 0 && !(ends(s - 1) < ends(s))) {
            refuse(kernel, entry("ends", s, ends(s)) + " is not above " +
                               entry("ends", s - 1, ends(s - 1)) + " (ends must ascend)");
        }
    }
    if (num > 0 && ends(num - 1) != n - 1) {
        refuse(kernel, entry("ends", num - 1, ends(num - 1)) + " must be n - 1 = " + text(n - 1) +
                           " (the last group ends at the longest size)");
    }
}

// A DP's number of groups, and its table of value positions (int32).
void check_groups(const char* kernel, const In<int64_t>& values, int64_t k) {
    check_scalar(kernel, "k", k, 1, INT64_MAX_, "must be >= 1");
    if (length(values) >= (int64_t(1) << 31)) refuse(kernel, "values holds 2**31 or more sizes");
}

Out<int64_t> static_cuts_py(In<int64_t> values, In<int64_t> counts, In<int64_t> rows,
                            int64_t k) {
    check_groups("static_cuts", values, k);
    check_table("static_cuts", values, counts, rows, std::min(k, length(values)));
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = static_cuts(values.data(), counts.data(), rows.data(), length(values), k);
    }
    return to_numpy(std::move(out));
}

int64_t shaped_cost_py(In<int64_t> values, In<int64_t> counts, In<int64_t> rows,
                       In<int64_t> ends) {
    check_table("shaped_cost", values, counts, rows, length(ends));
    check_ends("shaped_cost", ends, length(values));
    nb::gil_scoped_release nogil;
    return shaped_cost(values.data(), counts.data(), length(values), rows.data(), ends.data(),
                       length(ends));
}

nb::tuple polish_ends_py(In<int64_t> values, In<int64_t> counts, In<int64_t> rows,
                         In<int64_t> ends) {
    check_table("polish_ends", values, counts, rows, length(ends));
    check_ends("polish_ends", ends, length(values));
    Buffer<int64_t> out;
    int64_t best;
    {
        nb::gil_scoped_release nogil;
        best = polish_ends(values.data(), counts.data(), rows.data(), length(values), ends.data(),
                           length(ends), out);
    }
    return nb::make_tuple(to_numpy(std::move(out)), best);
}

Out<int64_t> carry_cuts_py(In<int64_t> values, In<int64_t> counts, In<int64_t> rows, int64_t k,
                           int64_t bound) {
    const char* kernel = "carry_cuts";
    check_groups(kernel, values, k);
    check_table(kernel, values, counts, rows, std::min(k, length(values)));
    if (length(values) == 0) refuse(kernel, "values is empty (no size to make a shape of)");
    check_scalar(kernel, "bound", bound, 0, MAX_COUNT, "must be in [0, 2**62]");
    // the DP's table holds open-batch counts as int32: at most min(rows, items so far) each
    int64_t items = 0;
    for (int64_t j = 0; j < length(values); ++j) {
        items = sat_add(items, counts(j));
        if (std::min(rows(j), items) >= (int64_t(1) << 31)) {
            refuse(kernel, entry("rows", j, rows(j)) + " with " + text(items) +
                               " items up to it: 2**31 or more open rows to track");
        }
    }
    Buffer<int64_t> out;
    {
        nb::gil_scoped_release nogil;
        out = carry_cuts(values.data(), counts.data(), rows.data(), length(values), k, bound);
    }
    return to_numpy(std::move(out));
}

}  // namespace

void bind_shapes(nb::module_& m) {
#define DEF(T)                                                                                 \
    m.def("shape_ends", &shape_ends_py<T>, nb::arg("sizes"), nb::arg("tiers"), nb::arg("caps"));
    PADLESS_FOR_SIZES(DEF)
#undef DEF
    m.def("pick_shapes", &pick_shapes_py, nb::arg("counts"), nb::arg("longest"), nb::arg("rows"),
          nb::arg("lengths"), nb::arg("pad_batches"));
    m.def("static_cuts", &static_cuts_py, nb::arg("values"), nb::arg("counts"), nb::arg("rows"),
          nb::arg("k"));
    m.def("shaped_cost", &shaped_cost_py, nb::arg("values"), nb::arg("counts"), nb::arg("rows"),
          nb::arg("ends"));
    m.def("polish_ends", &polish_ends_py, nb::arg("values"), nb::arg("counts"), nb::arg("rows"),
          nb::arg("ends"));
    m.def("carry_cuts", &carry_cuts_py, nb::arg("values"), nb::arg("counts"), nb::arg("rows"),
          nb::arg("k"), nb::arg("bound"));
}

}  // namespace padless
