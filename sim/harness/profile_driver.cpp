// Runs one program on a harness library for a fixed number of cycles, for
// `valgrind --tool=callgrind` (tensorfab.sim.rtl.block_profile): no Python under
// the profiler, and the cycles run inside tf_run, which the profile collects.
//
//   profile_driver LIB IMAGE INSN_BASE INSN_COUNT CYCLES
//                  READ_LAT WRITE_LAT BANDWIDTH MAX_OUTSTANDING READ_BUFFER ONCHIP
//
// Prints "cycles N status S" on success; exits 2 with a message otherwise.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

template <typename F>
static F sym(void* lib, const char* name) {
    void* p = dlsym(lib, name);
    if (!p) {
        std::fprintf(stderr, "profile_driver: %s has no symbol %s\n", "the harness", name);
        std::exit(2);
    }
    return reinterpret_cast<F>(p);
}

int main(int argc, char** argv) {
    if (argc != 12) {
        std::fprintf(stderr, "profile_driver: expected 11 arguments, got %d\n", argc - 1);
        return 2;
    }
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        std::fprintf(stderr, "profile_driver: %s\n", dlerror());
        return 2;
    }
    auto create = sym<void* (*)()>(lib, "tf_create");
    auto set_mem = sym<int (*)(void*, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
                               uint32_t)>(lib, "tf_set_mem");
    auto load = sym<void (*)(void*, const uint8_t*, uint64_t)>(lib, "tf_load_dram");
    auto reset = sym<void (*)(void*, uint32_t)>(lib, "tf_reset");
    auto start = sym<int (*)(void*, uint32_t, uint32_t, uint32_t)>(lib, "tf_start");
    auto run = sym<int (*)(void*, uint64_t, uint64_t, int)>(lib, "tf_run");
    auto run_cycles = sym<uint64_t (*)(void*)>(lib, "tf_run_cycles");
    auto message = sym<const char* (*)(void*)>(lib, "tf_message");

    std::FILE* f = std::fopen(argv[2], "rb");
    if (!f) {
        std::fprintf(stderr, "profile_driver: cannot open %s\n", argv[2]);
        return 2;
    }
    std::fseek(f, 0, SEEK_END);
    long size = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    std::vector<uint8_t> image(static_cast<size_t>(size));
    size_t got = std::fread(image.data(), 1, image.size(), f);
    std::fclose(f);
    if (got != image.size()) {
        std::fprintf(stderr, "profile_driver: short read of %s\n", argv[2]);
        return 2;
    }
    auto arg = [&](int i) { return static_cast<uint32_t>(std::strtoul(argv[i], nullptr, 10)); };
    void* h = create();
    if (set_mem(h, arg(6), arg(7), arg(8), arg(9), arg(10), arg(11))) {
        std::fprintf(stderr, "profile_driver: invalid memory timing\n");
        return 2;
    }
    load(h, image.data(), image.size());
    reset(h, 2);
    if (start(h, arg(3), arg(4), static_cast<uint32_t>(image.size()))) {
        std::fprintf(stderr, "profile_driver: %s\n", message(h));
        return 2;
    }
    int status = run(h, std::strtoull(argv[5], nullptr, 10), 0, 0);
    std::printf("cycles %llu status %d\n", static_cast<unsigned long long>(run_cycles(h)),
                status);
    return 0;
}
