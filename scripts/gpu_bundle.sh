#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh runs for a GPU machine that has NVIDIA's
# driver and the CUDA runtime (cuBLASLt) but none of this build's Debian
# packages: build-gpu's GPU tests and benches and the sgrt tool, stripped;
# the shared libraries they load that such a machine may lack (Lua, libpng,
# libjpeg); Debian's Vulkan loader and GLVND (NVIDIA's Vulkan driver is its GLX
# library); Fashion-MNIST. Writes .gpu/ (git-ignored, ~36 MB) with run.sh:
# copy the checkout with .gpu/ there and, from its root, as root,
#
#   OUT=dir bash .gpu/run.sh        # unpacks, then gpu_check.sh with SKIP_BUILD=1
#
# run.sh unpacks the loader into / and the data set into /usr/share/datasets,
# links the build's source directory (tests find their data there) to the
# checkout when it is missing, and points the Vulkan loader at NVIDIA's ICD.
# Build first without MPI (its libraries would be missing there):
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSGRT_CUDA=ON \
#     -DSGRT_VULKAN=ON -DSGRT_MPI=OFF -DCMAKE_CUDA_ARCHITECTURES=90a
#   ninja -C build-gpu   (or gpu_check.sh's target list)
# Usage: [BUILD_DIR=build-gpu] scripts/gpu_bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_targets.sh
build=${BUILD_DIR:-build-gpu}
[ -f "$build/CMakeCache.txt" ] || { echo "gpu_bundle: no build in $build (see this script's header)" >&2; exit 1; }
grep -q '^SGRT_MPI:BOOL=ON' "$build/CMakeCache.txt" &&
  { echo "gpu_bundle: $build links MPI; configure it with -DSGRT_MPI=OFF" >&2; exit 1; }
source_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin/$build"/{tools,tests,bench} "$stage/pack"/{lib,debs,fmnist}
cp "$build/tools/sgrt" "$stage/bin/$build/tools/"
for t in "${cuda_tests[@]}" "${vulkan_tests[@]}"; do cp "$build/tests/$t" "$stage/bin/$build/tests/"; done
for b in "${gpu_benches[@]}"; do cp "$build/bench/$b" "$stage/bin/$build/bench/"; done
strip "$stage/bin/$build"/*/*
tar -C "$stage/bin" -cJf "$stage/pack/bin.tar.xz" "$build"
for l in liblua5.4.so.0 libpng16.so.16 libjpeg.so.62; do
  cp -L "$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ {print $NF; exit}')" "$stage/pack/lib/"
done
(cd "$stage/pack/debs" && apt-get download libvulkan1 libglvnd0 libglx0 libgl1 libegl1 libgles2 libopengl0 >/dev/null 2>&1)
cp /usr/share/datasets/fashion-mnist/*.gz "$stage/pack/fmnist/"
cat >"$stage/pack/run.sh" <<EOF
#!/usr/bin/env bash
# Written by scripts/gpu_bundle.sh: unpacks this bundle, then runs gpu_check.sh.
set -u
cd "\$(dirname "\$0")/.."
for f in .gpu/debs/*.deb; do dpkg -x "\$f" /; done
ldconfig
[ -e "$source_dir" ] || { mkdir -p "$(dirname "$source_dir")" && ln -s "\$PWD" "$source_dir"; }
mkdir -p /usr/share/datasets/fashion-mnist && cp .gpu/fmnist/* /usr/share/datasets/fashion-mnist/
[ -f "$build/CMakeCache.txt" ] && { echo "run.sh: $build here is a build, not a bundle's: run on the GPU machine's copy" >&2; exit 1; }
rm -rf "$build" && tar -xJf .gpu/bin.tar.xz
export LD_LIBRARY_PATH=\$PWD/.gpu/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
icd=\$(find /usr/local/nvidia /usr/share/vulkan /etc/vulkan -name 'nvidia_icd*.json' 2>/dev/null | head -1)
[ -n "\$icd" ] && export VK_DRIVER_FILES=\$icd
ldd "$build/tools/sgrt" | grep "not found" && echo "run.sh: libraries missing (above)"
SKIP_BUILD=1 BUILD_DIR="$build" scripts/gpu_check.sh "\$@"
EOF
rm -rf .gpu
mv "$stage/pack" .gpu
echo "gpu_bundle: .gpu/ $(du -sh .gpu | cut -f1) (run there: OUT=dir bash .gpu/run.sh)"
