// Reading and writing Verilator ports of any width as little-endian bytes.
//
// Verilator represents a port of up to 8/16/32/64 bits as CData/SData/IData/QData
// and a wider one as VlWide<N> (N 32-bit words, least significant first). These
// helpers hide the difference so the memory model works for every bus width.
#ifndef TENSORFAB_PORT_BITS_H_
#define TENSORFAB_PORT_BITS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tf {

// Copy `n` little-endian bytes from `src` into a port.
template <typename T>
inline void put_bytes(T& port, const uint8_t* src, size_t n) {
    if constexpr (std::is_integral_v<T>) {
        uint64_t v = 0;
        std::memcpy(&v, src, n < sizeof(v) ? n : sizeof(v));
        port = static_cast<T>(v);
    } else {
        constexpr size_t words = sizeof(T) / sizeof(uint32_t);
        for (size_t i = 0; i < words; ++i) {
            uint32_t w = 0;
            if (4 * i < n) std::memcpy(&w, src + 4 * i, (n - 4 * i) < 4 ? (n - 4 * i) : 4);
            port[i] = w;
        }
    }
}

// Copy a port's value into `n` little-endian bytes at `dst`.
template <typename T>
inline void get_bytes(const T& port, uint8_t* dst, size_t n) {
    if constexpr (std::is_integral_v<T>) {
        uint64_t v = static_cast<uint64_t>(port);
        std::memcpy(dst, &v, n < sizeof(v) ? n : sizeof(v));
    } else {
        for (size_t i = 0; 4 * i < n; ++i) {
            uint32_t w = port[i];
            std::memcpy(dst + 4 * i, &w, (n - 4 * i) < 4 ? (n - 4 * i) : 4);
        }
    }
}

// The low 64 bits of a port.
template <typename T>
inline uint64_t low64(const T& port) {
    if constexpr (std::is_integral_v<T>) {
        return static_cast<uint64_t>(port);
    } else {
        return static_cast<uint64_t>(port[0]) | (static_cast<uint64_t>(port[1]) << 32);
    }
}

// Whether two values of a port are equal.
template <typename T>
inline bool same(const T& a, const T& b) {
    if constexpr (std::is_integral_v<T>) {
        return a == b;
    } else {
        return std::memcmp(&a, &b, sizeof(T)) == 0;
    }
}

inline uint64_t field(uint64_t word, unsigned offset, unsigned width) {
    return (word >> offset) & ((width >= 64) ? ~0ULL : ((1ULL << width) - 1));
}

}  // namespace tf

#endif  // TENSORFAB_PORT_BITS_H_
