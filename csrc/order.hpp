// Length order: a stable counting sort of small int keys, then a Fisher-Yates pass per run
// (the twin of padless/_kernels/order.py).
#pragma once

#include "common.hpp"
#include "rng.hpp"

namespace padless {

struct CountingOrder {
    Buffer<int64_t> order;   // positions by increasing key, ties in input order
    Buffer<int64_t> starts;  // starts[k]:starts[k+1] is the run of key k
    int64_t bad = -1;        // the first position whose key is outside [0, num_keys) (else -1)
};

// Stable counting sort of non-negative keys below num_keys; O(n + num_keys). With `names`,
// the order holds names[i] in place of each position i (the sort of a subset of a corpus,
// named by its indices in the whole: no gather after). A key outside [0, num_keys) stops the
// sort at the histogram, its position in `bad`, nothing else filled.
template <class K>
CountingOrder counting_order(const K* keys, int64_t n, int64_t num_keys,
                             const int64_t* names = nullptr) {
    CountingOrder out{Buffer<int64_t>(n), zeros<int64_t>(num_keys + 1)};
    int64_t* starts = out.starts.get();
    for (int64_t i = 0; i < n; ++i) {
        // a negative key is a large unsigned one: one comparison checks both ends
        const uint64_t k = static_cast<uint64_t>(static_cast<int64_t>(keys[i]));
        if (k >= static_cast<uint64_t>(num_keys)) {
            out.bad = i;
            return out;
        }
        starts[k + 1] += 1;
    }
    for (int64_t k = 0; k < num_keys; ++k) starts[k + 1] += starts[k];
    Buffer<int64_t> fill(num_keys);
    for (int64_t k = 0; k < num_keys; ++k) fill[k] = starts[k];
    int64_t* order = out.order.get();
    for (int64_t i = 0; i < n; ++i) {
        int64_t k = static_cast<int64_t>(keys[i]);
        order[fill[k]] = names == nullptr ? i : names[i];
        fill[k] += 1;
    }
    return out;
}

// Shuffle values[starts[r]:starts[r+1]] in place for every run r (Fisher-Yates, stream `key`).
template <class V>
void shuffle_runs(V* values, const int64_t* starts, int64_t num_starts, uint64_t key) {
    uint64_t state = key;
    for (int64_t r = 0; r + 1 < num_starts; ++r) {
        int64_t lo = starts[r];
        for (int64_t i = starts[r + 1] - 1; i > lo; --i) {
            int64_t j = lo + below(state, static_cast<uint64_t>(i - lo + 1));
            V tmp = values[i];
            values[i] = values[j];
            values[j] = tmp;
        }
    }
}

}  // namespace padless
