# All dependencies come from Debian's packages (scripts/setup installs them).
find_package(Threads REQUIRED)
find_package(TBB REQUIRED)
find_package(OpenCV REQUIRED COMPONENTS core imgproc imgcodecs)
find_package(TIFF REQUIRED)
# The TIFF writer compresses Deflate tiles itself, several at once (libtiff needs zlib anyway).
find_package(ZLIB REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(dnnl REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(OpenMP REQUIRED)
if(BIGTRAIN_TESTS)
  find_package(GTest REQUIRED)
endif()
# Optional: with MPI, `mpirun -np N bigtrain run` trains data-parallel (pipeline/distributed*).
find_package(MPI COMPONENTS CXX QUIET)
