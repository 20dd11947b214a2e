#pragma once
// One fuzz target = one definition of bigtrain_fuzz_one_input. It is linked either
// with libFuzzer's driver (libfuzzer_entry.cpp, clang builds with BIGTRAIN_FUZZ=ON)
// or with replay_main.cpp, which runs it on saved inputs in every build, so the
// regression corpus is checked by CI even where clang is absent.
//
// A target returns normally for any input bigtrain handles correctly (including a
// clean bigtrain::Error); anything else (another exception, a broken invariant, a
// sanitizer report) ends the process, which both drivers report as a failure.
#include <cstddef>
#include <cstdint>

int bigtrain_fuzz_one_input(const std::uint8_t* data, std::size_t size);

// Aborts with `message` on stderr: the fuzz targets' way of reporting a broken
// invariant so libFuzzer saves the input as a crash.
[[noreturn]] void bigtrain_fuzz_fail(const char* what, const char* detail);
