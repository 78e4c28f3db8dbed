// The 64-ary bit hierarchy and the per-space row stacks that best-fit packing runs on (the twin
// of the helpers at the top of padless/_kernels/packing.py; cost and windows use them too).
//
// Open rows are kept on one LIFO stack per remaining space r in [0, capacity]; bit r of the
// bottom level is set iff stack r is non-empty, each level above marks its non-empty words, so
// the smallest r >= size is found in O(log_64 capacity) words.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace padless {

// Position of the lowest set bit of a non-zero word.
inline int64_t lowest_bit(uint64_t word) { return __builtin_ctzll(word); }

class BitTree {
public:
    // A hierarchy over [0, universe), every bit clear.
    explicit BitTree(int64_t universe) {
        int64_t bits = universe, total = 0;
        while (true) {
            int64_t words = (bits + 63) >> 6;
            offs_.push_back(total);
            nbits_.push_back(bits);
            total += words;
            if (words == 1) break;
            bits = words;
        }
        words_.assign(static_cast<size_t>(total), 0);
    }

    void set(int64_t pos) {
        for (size_t lev = 0; lev < offs_.size(); ++lev) {
            uint64_t& word = words_[offs_[lev] + (pos >> 6)];
            uint64_t was = word;
            word = was | (uint64_t(1) << (pos & 63));
            if (was != 0) return;
            pos >>= 6;
        }
    }

    void clear(int64_t pos) {
        for (size_t lev = 0; lev < offs_.size(); ++lev) {
            uint64_t& word = words_[offs_[lev] + (pos >> 6)];
            word &= ~(uint64_t(1) << (pos & 63));
            if (word != 0) return;
            pos >>= 6;
        }
    }

    // Smallest set position >= pos, or -1.
    int64_t next(int64_t pos) const {
        const size_t levels = offs_.size();
        size_t lev = 0;
        while (true) {
            if (pos >= nbits_[lev]) return -1;
            int64_t w = pos >> 6;
            uint64_t word = words_[offs_[lev] + w] & (~uint64_t(0) << (pos & 63));
            if (word != 0) {
                pos = (w << 6) + lowest_bit(word);
                break;
            }
            lev += 1;
            if (lev == levels) return -1;
            pos = w + 1;
        }
        while (lev > 0) {
            lev -= 1;
            pos = (pos << 6) + lowest_bit(words_[offs_[lev] + pos]);
        }
        return pos;
    }

private:
    std::vector<int64_t> offs_;
    std::vector<int64_t> nbits_;
    std::vector<uint64_t> words_;
};

// Open rows by the space they have left: a stack per space (`head[space]` its top row, -1 when
// empty, `below[row]` the next one down) and the bit tree that marks the non-empty stacks.
class RowStacks {
public:
    explicit RowStacks(int64_t capacity) : tree_(capacity + 1), head_(capacity + 1, -1) {}

    // Put `row` on top of the stack of rows with `space` left.
    void push(int64_t row, int64_t space) {
        if (static_cast<size_t>(row) >= below_.size()) {
            below_.resize(2 * static_cast<size_t>(row) + 16);
        }
        below_[row] = head_[space];
        if (head_[space] < 0) tree_.set(space);
        head_[space] = row;
    }

    // Take the top row off the stack of rows with `space` left (the stack must be non-empty).
    int64_t pop(int64_t space) {
        int64_t row = head_[space];
        head_[space] = below_[row];
        if (head_[space] < 0) tree_.clear(space);
        return row;
    }

    // The smallest space >= `space` with an open row, or -1.
    int64_t fit(int64_t space) const { return tree_.next(space); }

    int64_t top(int64_t space) const { return head_[space]; }

private:
    BitTree tree_;
    std::vector<int64_t> head_;
    std::vector<int64_t> below_;
};

}  // namespace padless
