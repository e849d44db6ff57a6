# Cross build for 64-bit ARM Linux (Jetson Orin, Raspberry Pi 5, Graviton) with
# Debian's cross compilers (g++-aarch64-linux-gnu) and arm64 zlib from multiarch
# (zlib1g-dev:arm64). docs/edge.md; scripts/test_aarch64.sh uses it.
#
#   cmake -S . -B build-aarch64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#
# Only the runtime side is built (SGRT_RUNTIME_ONLY: no Lua, compiler or sgrt
# tool); flatc runs on the build machine. ctest runs the tests through
# qemu-aarch64 where it is installed (Debian's qemu-user).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Libraries and headers from the arm64 sysroot and multiarch directories only;
# programs (flatc) from the build machine.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(SGRT_RUNTIME_ONLY ON CACHE BOOL "cross build: runtime side only")
set(SGRT_VULKAN OFF CACHE BOOL "")
set(SGRT_CUDA OFF CACHE BOOL "")

find_program(SGRT_QEMU_AARCH64 qemu-aarch64)
if(SGRT_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${SGRT_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
