// Per-line counters for text: whitespace tokens, UTF-8 characters or bytes per line (the twin of
// padless/_text_kernels.py).
//
// The text is walked in blocks that fit the L1 cache. Pass 1 over a block is branch-free byte
// arithmetic that the compiler vectorises; it writes one flag byte per input byte (bit 0: the
// byte counts, i.e. starts a token, or is a character or byte of the line; bit 1: it ends a
// line). Pass 2 reads the flags eight at a time as one 64-bit word: a word without a newline adds
// its count with one multiply; a word with one is resolved without branches.
#pragma once

#include <cstdint>

namespace padless {

inline constexpr int64_t TEXT_WHITESPACE = 0, TEXT_CHARS = 1, TEXT_BYTES = 2;

// The flag loops work on uint8_t 0/1 values, not bools: so the compiler vectorises them (a bool
// reduction such as the NUL test keeps GCC from it).

// 1 if x is ASCII whitespace as bytes.split() sees it: \t \n \v \f \r (9-13) and space.
__attribute__((always_inline)) inline uint8_t text_space(uint8_t x) {
    return static_cast<uint8_t>((x == 32) | (static_cast<uint8_t>(x - 9) < 5));
}

// A flag byte: bit 0 the byte counts, bit 1 it ends a line.
__attribute__((always_inline)) inline uint8_t text_flag(uint8_t counted, uint8_t x) {
    return static_cast<uint8_t>(counted | ((x == 10) << 1));
}

// Flags of block[0:m] in whitespace mode (a byte counts when it is not whitespace and the byte
// before it is; `prev_space` stands for the byte before the block); returns whether a NUL byte
// is among them.
__attribute__((always_inline)) inline bool flag_words(const uint8_t* block, int64_t m,
                                                      uint8_t* flags, bool prev_space) {
    uint8_t x = block[0];
    flags[0] = text_flag(static_cast<uint8_t>((text_space(x) ^ 1) & prev_space), x);
    uint8_t nul = x == 0;
    for (int64_t j = 1; j < m; ++j) {
        x = block[j];
        uint8_t starts = static_cast<uint8_t>((text_space(x) ^ 1) & text_space(block[j - 1]));
        flags[j] = text_flag(starts, x);
        nul |= x == 0;
    }
    return nul != 0;
}

// Flags of block[0:m] in chars/bytes mode; a \r followed by \n does not count. `next_byte`
// follows the block (-1 at the end of the piece: a last \r counts for now and is undone if the
// next piece starts with \n). Returns whether a NUL byte is among them.
__attribute__((always_inline)) inline bool flag_units(const uint8_t* block, int64_t m,
                                                      uint8_t* flags, bool chars,
                                                      int64_t next_byte) {
    // bytes mode counts every byte; chars mode skips 10xxxxxx continuation bytes
    const uint8_t mask = chars ? 0xC0 : 0;
    const uint8_t cont = chars ? 0x80 : 1;
    const int64_t last = m - 1;
    uint8_t nul = 0;
    for (int64_t j = 0; j < last; ++j) {
        const uint8_t x = block[j];
        const uint8_t counted = static_cast<uint8_t>(((x & mask) != cont) & (x != 10) &
                                                     ((x != 13) | (block[j + 1] != 10)));
        flags[j] = text_flag(counted, x);
        nul |= x == 0;
    }
    const uint8_t x = block[last];
    const uint8_t counted =
        static_cast<uint8_t>(((x & mask) != cont) & (x != 10) & ((x != 13) | (next_byte != 10)));
    flags[last] = text_flag(counted, x);
    nul |= x == 0;
    return nul != 0;
}

struct LineCount {
    int64_t done;   // bytes of the piece consumed
    int64_t n_out;  // lines now in out
    int64_t nul;    // index of the first NUL byte in the piece, -1 if none
};

// Write the count of every line that ends (with \n) in buf[0:n] to out from n_out (see
// padless._text_kernels.count_lines): `state` (2 entries: the open line's count, and whether the
// last byte was whitespace / a \r) carries the open line to the next call; `flags` is a scratch
// area of `step` bytes (a multiple of 8), the block size. Stops before a block when out (of
// out_size entries) has no room for step + 8 more lines, and at the first NUL byte.
LineCount count_lines(const uint8_t* buf, int64_t n, int64_t mode, int64_t* out,
                      int64_t out_size, int64_t n_out, int64_t* state, uint8_t* flags,
                      int64_t step);

}  // namespace padless
