#!/usr/bin/env bash
# Prepares the GPU check (scripts/gpu/check.sh) for a device machine that reaches no package
# registry. Run it here, on Debian: it downloads the Debian packages that ooze builds against
# and that the device's image (CUDA, PyTorch, CMake, ninja, a compiler) does not hold into
# .deps/gpu/debs (ignored by git), checks that they and the working tree fit in what one device
# call carries (64 MiB), and prints the call to make.
#
#   scripts/gpu/prepare.sh
#
# check.sh unpacks them with `dpkg -x` into a prefix of its own: nothing is installed on the
# device, and where the device already has a runtime library of the same soname, its own copy is
# used.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
debs="$root/.deps/gpu/debs"
carry_limit=$((64 * 1024 * 1024))

# What the build needs besides LibTorch, CUDA, NCCL and Python (the device's own), as Debian
# packages: headers, CMake and pkg-config files, and the runtime libraries they link to.
build_packages=(
  libzmq3-dev cppzmq-dev libcereal-dev rapidjson-dev nlohmann-json3-dev
  libboost1.74-dev                       # Boost.Beast and Boost.Asio, header-only
  libgtest-dev libgmock-dev
  libpcre2-dev libicu-dev
  libginac-dev libcln-dev libgmp-dev     # the math reward rules (rollout/rewards/)
  libprotobuf-dev protobuf-compiler      # TensorBoard event files (core/proto/)
  libgloo-dev                            # used unless the device's LibTorch exports its own Gloo
  pkgconf-bin libpkgconf3                # GiNaC is found through pkg-config
)
runtime_packages=(
  libzmq5 libsodium23 libpgm-5.3-0 libnorm1 libbsd0 libmd0
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2
  libpcre2-8-0 libicu72
  libginac11 libcln6 libgmp10
  libprotobuf32 libprotobuf-lite32 libprotoc32
  libgloo0 libibverbs1 libnl-3-200 libnl-route-3-200 libhiredis0.14
)

mkdir -p "$debs"
cd "$debs"
# apt-get download needs the package lists that scripts/install-deps.sh (or any apt-get update)
# left; a package already downloaded is not fetched again.
missing=()
for pkg in "${build_packages[@]}" "${runtime_packages[@]}"; do
  compgen -G "${pkg}_*.deb" >/dev/null || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get -q -o APT::Sandbox::User="$(id -un)" download "${missing[@]}" >/dev/null || {
    echo "prepare: cannot download the Debian packages ${missing[*]} (run apt-get update?)" >&2
    exit 1
  }
fi

# The working tree that a device call sends: tracked and untracked-but-not-ignored files.
tree_bytes=$(cd "$root" && git ls-files -z --cached --others --exclude-standard |
  xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
debs_bytes=$(du -cb "$debs"/*.deb | tail -1 | cut -f1)
total=$((tree_bytes + debs_bytes))
printf 'prepare: %d packages, %.1f MiB; working tree %.1f MiB; together %.1f of 64 MiB\n' \
  "$(ls "$debs"/*.deb | wc -l)" "$(echo "$debs_bytes / 1048576" | bc -l)" \
  "$(echo "$tree_bytes / 1048576" | bc -l)" "$(echo "$total / 1048576" | bc -l)"
if [ "$total" -gt "$carry_limit" ]; then
  echo "prepare: over the 64 MiB one device call carries" >&2
  exit 1
fi

cat <<'EOF'
prepare: on a lent device, run (a second run while the machine is warm reuses the build):
  run(command="bash scripts/gpu/check.sh", carry=[".deps/gpu/debs"], timeout_s=600)
prepare: here, the same selection on the CPU against Debian's LibTorch:
  bash scripts/gpu/check.sh --cpu-dry-run
EOF
