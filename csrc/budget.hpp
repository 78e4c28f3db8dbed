// Token-budget batching: fairseq's greedy rule over sizes in order, or over runs of one size
// (the twin of padless/_kernels/budget.py). The rule is here, in the header, because the stream
// rounds and the windowed plans run it too.
#pragma once

#include "common.hpp"
#include "sat.hpp"

namespace padless {

// count % multiple == 0, with a mask when `multiple` is a power of two (1, 8, 64...).
inline bool multiple_of(int64_t count, int64_t multiple) {
    if ((multiple & (multiple - 1)) == 0) return (count & (multiple - 1)) == 0;
    return count % multiple == 0;
}

// The state of the greedy rule: batches closed so far, the open batch [start, cut) with its
// longest size, and the tail [cut, pos] with its own.
struct BudgetWalk {
    int64_t closed = 0, start = 0, cut = 0, batch_max = 0, tail_max = 0;
    int64_t max_tokens, max_sentences, multiple;  // 0 = no limit (tokens, sentences)

    BudgetWalk(int64_t tokens, int64_t sentences, int64_t mult)
        : max_tokens(tokens), max_sentences(sentences), multiple(mult) {}

    // One item (position pos, size s). The tail joins the batch whenever the union is small
    // (< multiple) or a multiple of `multiple`. When batch + tail would break a limit, the batch
    // closes and the tail opens the next; if the tail alone (with the new item) breaks
    // max_tokens, the tail without the new item closes too.
    void step(int64_t pos, int64_t s, int64_t* ends) {
        if (s > tail_max) tail_max = s;
        int64_t count = pos + 1 - start;
        int64_t longest = batch_max > tail_max ? batch_max : tail_max;
        bool over = (max_sentences > 0 && count > max_sentences) ||
                    (max_tokens > 0 && mul_exceeds(count, longest, max_tokens));
        if (over) {
            ends[closed++] = cut;
            if (max_tokens > 0 && mul_exceeds(pos + 1 - cut, tail_max, max_tokens)) {
                ends[closed++] = pos;
                tail_max = s;
                start = pos;
            } else {
                start = cut;
            }
            cut = pos + 1;
            batch_max = tail_max;
            tail_max = 0;
        } else if (count < multiple || multiple_of(count, multiple)) {
            cut = pos + 1;
            batch_max = longest;
            tail_max = 0;
        }
    }

    // Close what is open once n positions have been walked.
    void finish(int64_t n, int64_t* ends) {
        if (cut > start) ends[closed++] = cut;
        if (n > cut) ends[closed++] = n;
    }
};

// Batch ends of the greedy rule. Positions starts[r]:starts[r+1] all have size values[r]; with
// no starts (num_starts == 0) there is one position per value, values being the sizes in order.
//
// With multiple >= 1 and every item within max_tokens, every batch holds an item, so there are
// at most n ends. The runs' sizes are checked against the budget before (bind_base); sizes one
// per position are not (that would be a pass of its own), so their buffer has room for two ends
// per step, as many as a step can close whatever the sizes, and `over_at` gets the first item
// over max_tokens (-1 if none), found among the batches of one item: an item over the budget
// breaks it with any other, so the rule always closes it in a batch of its own.
template <class T>
Buffer<int64_t> budget_ends_runs(const T* values, int64_t num_values, const int64_t* starts,
                                 int64_t num_starts, int64_t max_tokens, int64_t max_sentences,
                                 int64_t multiple, int64_t* over_at = nullptr) {
    bool per_item = num_starts == 0;
    int64_t n = per_item ? num_values : starts[num_starts - 1];
    Buffer<int64_t> ends(per_item ? 2 * n + 2 : n + 1);
    BudgetWalk walk(max_tokens, max_sentences, multiple);
    if (per_item) {
        for (int64_t pos = 0; pos < n; ++pos) {
            walk.step(pos, static_cast<int64_t>(values[pos]), ends.get());
        }
    } else {
        for (int64_t r = 0; r + 1 < num_starts; ++r) {
            int64_t s = static_cast<int64_t>(values[r]);
            for (int64_t pos = starts[r]; pos < starts[r + 1]; ++pos) walk.step(pos, s, ends.get());
        }
    }
    walk.finish(n, ends.get());
    ends.used = walk.closed;
    if (over_at != nullptr) {
        *over_at = -1;
        for (int64_t b = 0, first = 0; per_item && max_tokens > 0 && b < ends.used; ++b) {
            const int64_t end = ends[b];
            if (end - first == 1 && static_cast<int64_t>(values[first]) > max_tokens) {
                *over_at = first;
                break;
            }
            first = end;
        }
    }
    // the second half of a per-item buffer is never touched when no item is over (no pages):
    // the result is kept or trimmed as one of n + 1 entries would be (owned_array)
    if (per_item) ends.capacity = n + 1;
    return ends;
}

}  // namespace padless
