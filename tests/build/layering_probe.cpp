// Compiled only by the build.layering tests (tests/CMakeLists.txt), with the include
// roots of pipeline/report/'s library: PROBE_INCLUDE names the header to try.
#include PROBE_INCLUDE

int layering_probe() { return 0; }
